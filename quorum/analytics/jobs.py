"""Replay jobs over the ``metaquorum`` table (``quorum.analytics.source``).

Each job is a function of the records DataFrame (``load(spark, path)``, or any DataFrame with
the source's schema, e.g. one read back from Parquet) that returns a DataFrame; nothing is
computed until an action runs. The jobs read log rows only (``snapshot_end_offset IS NULL``).
Times are ``TIMESTAMP`` columns made from the batch timestamps (the leader's clock when it
wrote the batch); ``*_ms`` columns are plain milliseconds.

==============================  ===============================================================
job                             one row per
==============================  ===============================================================
``topic_lifecycle``             topic id: name, topic_id, created_offset, created_time,
                                deleted_offset, deleted_time (NULL while alive), partitions,
                                internal
``name_reuse``                  name with more than one topic id: ids in creation order and the
                                gaps between one incarnation's deletion and the next creation
``partitions_per_broker_over_time``  (broker, offset) where the broker's count of hosted
                                partition replicas or led partitions changes
``leadership_timeline``         LeaderChangeMessage: epoch, leader, voters, offset, time, and
                                how long the epoch lasted
``broker_events``               RegisterBroker/UnregisterBroker/FenceBroker/UnfenceBroker record
``state_as_of(df, offset)``     (topic_id, partition) of the image after applying every record
                                at or below ``offset``
==============================  ===============================================================

The jobs keep to one scan of the source where they can (conditional aggregates instead of
self-joins), because each scan of the source decodes the log again; ``metaquorum replay``
persists the decoded records once and runs every job on that.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from pyspark.sql import Column, Window
from pyspark.sql import functions as F

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "JOBS",
    "broker_events",
    "leadership_timeline",
    "log_records",
    "name_reuse",
    "partitions_per_broker_over_time",
    "state_as_of",
    "topic_lifecycle",
]

_TYPE: Final = "record_type"
TOPIC: Final = "TopicRecord"
REMOVE_TOPIC: Final = "RemoveTopicRecord"
PARTITION: Final = "PartitionRecord"
PARTITION_CHANGE: Final = "PartitionChangeRecord"
LEADER_CHANGE: Final = "LeaderChangeMessage"
BROKER_EVENTS: Final = {
    "RegisterBrokerRecord": "registered",
    "UnregisterBrokerRecord": "unregistered",
    "FenceBrokerRecord": "fenced",
    "UnfenceBrokerRecord": "unfenced",
}
NO_LEADER: Final = -1


def _is(record_type: str) -> Column:
    return F.col(_TYPE) == F.lit(record_type)


def _time(ms_column: str | Column) -> Column:
    column = F.col(ms_column) if isinstance(ms_column, str) else ms_column
    return F.timestamp_millis(column)


def log_records(df: DataFrame) -> DataFrame:
    """The rows of log segments (not of snapshots)."""
    return df.filter(F.col("snapshot_end_offset").isNull())


# ----- topic lifecycle and name reuse -------------------------------------------------------


def _lifecycle_ms(df: DataFrame) -> DataFrame:
    """Per topic id, in one pass: its TopicRecord, its RemoveTopicRecord, its partitions."""
    rows = log_records(df).filter(F.col(_TYPE).isin(TOPIC, REMOVE_TOPIC, PARTITION))
    topic, remove = _is(TOPIC), _is(REMOVE_TOPIC)
    aggregated = rows.groupBy("topic_id").agg(
        F.max(F.when(topic, F.col("name"))).alias("name"),
        F.min(F.when(topic, F.col("offset"))).alias("created_offset"),
        F.min(F.when(topic, F.col("batch_timestamp_ms"))).alias("created_ms"),
        F.max(F.when(topic, F.col("internal"))).alias("internal"),
        F.min(F.when(remove, F.col("offset"))).alias("deleted_offset"),
        F.min(F.when(remove, F.col("batch_timestamp_ms"))).alias("deleted_ms"),
        F.size(F.collect_set(F.when(_is(PARTITION), F.col("partition")))).alias("partitions"),
    )
    # Ids whose TopicRecord is not in the rows read (before startOffset) have no name to show.
    return aggregated.filter(F.col("created_offset").isNotNull())


def topic_lifecycle(df: DataFrame) -> DataFrame:
    """name, topic_id, created_offset, created_time, deleted_offset, deleted_time, partitions,
    internal; ordered by creation. ``partitions`` counts the distinct partitions the topic ever
    had (PartitionRecords, including ones added later)."""
    return (
        _lifecycle_ms(df)
        .select(
            "name",
            "topic_id",
            "created_offset",
            _time("created_ms").alias("created_time"),
            "deleted_offset",
            _time("deleted_ms").alias("deleted_time"),
            F.col("partitions").cast("int").alias("partitions"),
            "internal",
        )
        .orderBy("created_offset")
    )


def name_reuse(df: DataFrame) -> DataFrame:
    """Every name that had more than one topic id (KIP-516's reason to exist): name,
    incarnations, topic_ids / created_offsets / deleted_offsets (creation order), and per
    recreation the gap since the previous incarnation was deleted: gap_offsets, gap_ms
    (``incarnations - 1`` elements)."""
    by_name = Window.partitionBy("name").orderBy("created_offset")
    lifecycle = _lifecycle_ms(df).select(
        "name",
        "topic_id",
        "created_offset",
        "deleted_offset",
        (F.col("created_offset") - F.lag("deleted_offset").over(by_name)).alias("gap_offsets"),
        (F.col("created_ms") - F.lag("deleted_ms").over(by_name)).alias("gap_ms"),
    )
    incarnations = F.sort_array(
        F.collect_list(
            F.struct("created_offset", "topic_id", "deleted_offset", "gap_offsets", "gap_ms")
        )
    )
    grouped = (
        lifecycle.groupBy("name")
        .agg(F.count("*").cast("int").alias("incarnations"), incarnations.alias("i"))
        .filter(F.col("incarnations") > 1)
    )
    later = F.slice(F.col("i"), 2, F.col("incarnations") - 1)
    return grouped.select(
        "name",
        "incarnations",
        F.col("i.topic_id").alias("topic_ids"),
        F.col("i.created_offset").alias("created_offsets"),
        F.col("i.deleted_offset").alias("deleted_offsets"),
        later.getField("gap_offsets").alias("gap_offsets"),
        later.getField("gap_ms").alias("gap_ms"),
    ).orderBy("name")


# ----- partitions per broker ----------------------------------------------------------------


def partitions_per_broker_over_time(df: DataFrame) -> DataFrame:
    """broker_id, offset, time, partitions (replicas hosted), leaders (partitions led): one row
    per offset at which either count of a broker changes, with the counts after that offset.

    Built from PartitionRecord (a new assignment), PartitionChangeRecord (NULL replicas or
    leader: unchanged) and RemoveTopicRecord (every partition of the topic goes away)."""
    log = log_records(df)
    changes = log.filter(F.col(_TYPE).isin(PARTITION, PARTITION_CHANGE)).select(
        "topic_id", "partition", "offset", "batch_timestamp_ms", "replicas", "leader"
    )
    keys = log.filter(_is(PARTITION)).select("topic_id", "partition").distinct()
    removals = (
        log.filter(_is(REMOVE_TOPIC))
        .select("topic_id", "offset", "batch_timestamp_ms")
        .join(keys, "topic_id")
        .select(
            "topic_id",
            "partition",
            "offset",
            "batch_timestamp_ms",
            F.array().cast("array<int>").alias("replicas"),
            F.lit(NO_LEADER).alias("leader"),
        )
    )
    history = Window.partitionBy("topic_id", "partition").orderBy("offset")
    so_far = history.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    states = (
        changes.unionByName(removals)
        .select(
            "topic_id",
            "partition",
            "offset",
            "batch_timestamp_ms",
            F.last("replicas", ignorenulls=True).over(so_far).alias("replicas"),
            F.last("leader", ignorenulls=True).over(so_far).alias("leader"),
        )
        .select(
            "offset",
            "batch_timestamp_ms",
            "replicas",
            "leader",
            F.coalesce(F.lag("replicas").over(history), F.array().cast("array<int>")).alias(
                "previous_replicas"
            ),
            F.coalesce(F.lag("leader").over(history), F.lit(NO_LEADER)).alias("previous_leader"),
        )
    )
    leader_changed = F.col("leader") != F.col("previous_leader")

    def delta(broker: Column, replicas: int, leaders: int) -> Column:
        return F.struct(
            broker.alias("broker_id"),
            F.lit(replicas).alias("d_partitions"),
            F.lit(leaders).alias("d_leaders"),
        )

    empty = F.array().cast("array<struct<broker_id:int,d_partitions:int,d_leaders:int>>")
    deltas = F.concat(
        F.transform(F.array_except("replicas", "previous_replicas"), lambda b: delta(b, 1, 0)),
        F.transform(F.array_except("previous_replicas", "replicas"), lambda b: delta(b, -1, 0)),
        F.when(
            leader_changed & (F.col("leader") != NO_LEADER),
            F.array(delta(F.col("leader"), 0, 1)),
        ).otherwise(empty),
        F.when(
            leader_changed & (F.col("previous_leader") != NO_LEADER),
            F.array(delta(F.col("previous_leader"), 0, -1)),
        ).otherwise(empty),
    )
    per_offset = (
        states.select("offset", "batch_timestamp_ms", F.explode(deltas).alias("d"))
        .groupBy("d.broker_id", "offset", "batch_timestamp_ms")
        .agg(F.sum("d.d_partitions").alias("dp"), F.sum("d.d_leaders").alias("dl"))
        .filter((F.col("dp") != 0) | (F.col("dl") != 0))
    )
    running = (
        Window.partitionBy("broker_id")
        .orderBy("offset")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    return per_offset.select(
        "broker_id",
        "offset",
        _time("batch_timestamp_ms").alias("time"),
        F.sum("dp").over(running).cast("int").alias("partitions"),
        F.sum("dl").over(running).cast("int").alias("leaders"),
    ).orderBy("broker_id", "offset")


# ----- quorum leadership and brokers --------------------------------------------------------


def leadership_timeline(df: DataFrame) -> DataFrame:
    """epoch, leader, voters, offset, time, end_offset, duration_ms: one row per
    LeaderChangeMessage; the epoch lasts until the next one (NULL for the current epoch)."""
    changes = log_records(df).filter(_is(LEADER_CHANGE))
    # Leader changes are few (one per election): one partition is fine for this window.
    ordered = Window.orderBy("offset")
    return changes.select(
        F.col("quorum_epoch").alias("epoch"),
        F.col("leader_id").alias("leader"),
        "voters",
        "offset",
        _time("batch_timestamp_ms").alias("time"),
        F.lead("offset").over(ordered).alias("end_offset"),
        (F.lead("batch_timestamp_ms").over(ordered) - F.col("batch_timestamp_ms")).alias(
            "duration_ms"
        ),
    ).orderBy("offset")


def broker_events(df: DataFrame) -> DataFrame:
    """broker_id, event (registered, unregistered, fenced, unfenced), offset, time,
    broker_epoch, and for registrations incarnation_id, rack, fenced (the state it registered
    in) and endpoints."""
    event = F.create_map(*[F.lit(x) for pair in BROKER_EVENTS.items() for x in pair])
    return (
        log_records(df)
        .filter(F.col(_TYPE).isin(*BROKER_EVENTS))
        .select(
            "broker_id",
            event[F.col(_TYPE)].alias("event"),
            "offset",
            _time("batch_timestamp_ms").alias("time"),
            "broker_epoch",
            "incarnation_id",
            "rack",
            "fenced",
            "endpoints",
        )
        .orderBy("offset")
    )


# ----- the image at an offset ---------------------------------------------------------------

STATE_COLUMNS: Final = (
    "topic_id",
    "name",
    "internal",
    "partition",
    "replicas",
    "isr",
    "leader",
    "leader_epoch",
    "partition_epoch",
)
_PARTITION_FIELDS: Final = ("replicas", "isr", "leader", "leader_epoch", "partition_epoch")


def state_as_of(df: DataFrame, offset: int) -> DataFrame:
    """The topics and partitions of the image after every record at or below ``offset``: one
    row per (topic_id, partition) with the columns of ``STATE_COLUMNS``.

    Replay rules (as the controller's image applies them): a TopicRecord creates the id, a
    RemoveTopicRecord removes the topic and its partitions; the last PartitionRecord of a
    partition sets all its fields and each later PartitionChangeRecord overwrites the fields it
    does not leave NULL (last writer wins per field). A topic with no partition yet (``offset``
    inside its creation batch) has one row with NULL partition fields. Rows are ordered by
    name and partition, so they compare directly with an image dumped the same way.
    """
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")
    upto = log_records(df).filter(F.col("offset") <= F.lit(offset))
    topics = (
        upto.filter(F.col(_TYPE).isin(TOPIC, REMOVE_TOPIC))
        .groupBy("topic_id")
        .agg(
            F.max(F.when(_is(TOPIC), F.col("name"))).alias("name"),
            F.max(F.when(_is(TOPIC), F.col("internal"))).alias("internal"),
            F.max(_is(REMOVE_TOPIC)).alias("removed"),
        )
        .filter(F.col("name").isNotNull() & ~F.col("removed"))
        .drop("removed")
    )
    changes = upto.filter(F.col(_TYPE).isin(PARTITION, PARTITION_CHANGE))
    key = Window.partitionBy("topic_id", "partition")
    # Only the last PartitionRecord of a key and the changes after it count.
    since_base = changes.withColumn(
        "base_offset", F.max(F.when(_is(PARTITION), F.col("offset"))).over(key)
    ).filter(F.col("offset") >= F.col("base_offset"))
    partitions = since_base.groupBy("topic_id", "partition").agg(
        *[
            F.max_by(field, F.when(F.col(field).isNotNull(), F.col("offset"))).alias(field)
            for field in _PARTITION_FIELDS
        ]
    )
    return (
        topics.join(partitions, "topic_id", "left")
        .select(*STATE_COLUMNS)
        .orderBy("name", "partition")
    )


JOBS: Final = {
    "topic_lifecycle": topic_lifecycle,
    "name_reuse": name_reuse,
    "partitions_per_broker_over_time": partitions_per_broker_over_time,
    "leadership_timeline": leadership_timeline,
    "broker_events": broker_events,
}
"""The full-history jobs by output name (``state_as_of`` takes an offset too)."""
