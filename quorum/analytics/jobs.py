"""Replay jobs over the ``metaquorum`` table (``quorum.analytics.source``).

Each job is a function of the records DataFrame (``load(spark, path)``, or any DataFrame with
the source's schema, e.g. one read back from Parquet) that returns a DataFrame. Times are
``TIMESTAMP`` columns made from the batch timestamps (the leader's clock when it wrote the
batch); ``*_ms`` columns are plain milliseconds.

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
``partition_elections``         a partition's leader changed: previous and new leader, leader
                                epoch, and why, from the change itself
``broker_events``               RegisterBroker/UnregisterBroker/FenceBroker/UnfenceBroker record
``state_as_of(df, offset)``     (topic_id, partition) of the image after applying every record
                                at or below ``offset``
``voters_as_of(df, offset)``    the voter set in force there (KIP-853: the last VotersRecord,
                                else a static quorum's last LeaderChangeMessage voters)
==============================  ===============================================================

Snapshots. Retention deletes the log segments before a snapshot (metadata.max.retention.*),
so a log may not start at offset 0; its history before the log start is then only in
``.checkpoint`` files, which the source reads with ``includeSnapshots`` (rows with
``snapshot_end_offset`` set, whose ``offset`` is a position inside the snapshot). The jobs use
them as follows:

- ``state_as_of(N)`` starts from a *base*: the newest snapshot whose end offset E is at most
  ``N + 1`` (the image at E - 1), or the empty image before offset 0, and applies the log rows
  at offsets E..N on top. It is exact whenever the rows read cover that (``N = E - 1``, or a
  log that starts at or before E); for any other N it raises ``StateNotAvailableError``, which
  names the offsets whose state can be computed (the earliest among them first).
- ``topic_lifecycle`` and ``name_reuse`` also list the topics a snapshot knows: live ones from
  its ``TopicRecord`` + ``TopicIdentityRecord`` (the creation offset) and removed ones from its
  ``DeletedTopicRecord`` (creation and deletion offsets). A creation or deletion that happened
  before the log start has no time (NULL); a topic known only from a ``DeletedTopicRecord``
  has NULL ``partitions`` and ``internal``.
- ``partitions_per_broker_over_time`` starts from the oldest base from which the rows read run
  without a gap to the end of the log (a snapshot's partitions appear at offset E - 1, with the
  snapshot's timestamp: that of the last batch it covers).
- ``leadership_timeline``, ``partition_elections`` and ``broker_events`` are events: they exist
  for the log read only.

Which snapshots the rows hold and where their log starts is a ``Coverage``. The jobs that need
it (``state_as_of``, ``partitions_per_broker_over_time``) take it as an argument; without one
they compute it with one small action on ``df`` (``Coverage.of(df)``: cheap once ``df`` is
persisted, a full decode of the log otherwise). ``Coverage.of_listing(path, **options)`` gives
the same from the file names alone, without reading anything. Every other job is lazy: nothing
is computed until an action runs.

The jobs keep to one scan of the source where they can (conditional aggregates instead of
self-joins), because each scan of the source decodes the log again; ``metaquorum replay``
persists the decoded records once and runs every job on that.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from pyspark.sql import Column, Window
from pyspark.sql import functions as F

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "ACL_COLUMNS",
    "JOBS",
    "Coverage",
    "StateNotAvailableError",
    "acls_as_of",
    "broker_events",
    "leadership_timeline",
    "log_records",
    "name_reuse",
    "partition_elections",
    "partitions_per_broker_over_time",
    "state_as_of",
    "topic_lifecycle",
]

_TYPE: Final = "record_type"
TOPIC: Final = "TopicRecord"
REMOVE_TOPIC: Final = "RemoveTopicRecord"
TOPIC_IDENTITY: Final = "TopicIdentityRecord"  # snapshots only
DELETED_TOPIC: Final = "DeletedTopicRecord"  # snapshots only
ACL: Final = "AccessControlEntryRecord"
REMOVE_ACL: Final = "RemoveAccessControlEntryRecord"
PARTITION: Final = "PartitionRecord"
PARTITION_CHANGE: Final = "PartitionChangeRecord"
LEADER_CHANGE: Final = "LeaderChangeMessage"
VOTERS: Final = "VotersRecord"
BROKER_EVENTS: Final = {
    "RegisterBrokerRecord": "registered",
    "UnregisterBrokerRecord": "unregistered",
    "FenceBrokerRecord": "fenced",
    "UnfenceBrokerRecord": "unfenced",
}
# The broker struct's fields that only registrations fill (broker_events shows them flat).
_REGISTRATION_FIELDS: Final = ("incarnation_id", "rack", "fenced", "endpoints")
NO_LEADER: Final = -1


def _is(record_type: str) -> Column:
    return F.col(_TYPE) == F.lit(record_type)


def _time(ms_column: str | Column) -> Column:
    column = F.col(ms_column) if isinstance(ms_column, str) else ms_column
    return F.timestamp_millis(column)


def log_records(df: DataFrame) -> DataFrame:
    """The rows of log segments (not of snapshots)."""
    return df.filter(F.col("snapshot_end_offset").isNull())


# ----- what the rows cover: log start and snapshots ------------------------------------------


class StateNotAvailableError(ValueError):
    """The rows read do not determine the image at the offset asked for (it lies before the
    oldest snapshot read, or in a stretch of the log that was deleted)."""


@dataclass(frozen=True, slots=True)
class Coverage:
    """Where the log rows of a records DataFrame start and which snapshots it holds.

    ``log_start`` is the first log offset read; the source checks that log rows are contiguous
    from there to the end of the log. A log without rows (everything was cleaned behind the
    newest snapshot) starts at that snapshot's end offset, or at 0 if there is none.
    ``snapshot_ends`` are the end offsets of the snapshots read, ascending.
    """

    log_start: int
    snapshot_ends: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.log_start < 0 or any(end < 0 for end in self.snapshot_ends):
            raise ValueError(f"offsets must be >= 0: {self}")
        if list(self.snapshot_ends) != sorted(set(self.snapshot_ends)):
            raise ValueError(f"snapshot_ends must be ascending and distinct: {self}")

    @classmethod
    def of(cls, df: DataFrame) -> Coverage:
        """The coverage of ``df`` (an action: one aggregate over it; persist ``df`` first, or use
        ``of_listing``, if it is a fresh ``load``)."""
        rows = df.groupBy("snapshot_end_offset").agg(F.min("offset").alias("first")).collect()
        snapshot_ends = sorted(r["snapshot_end_offset"] for r in rows if r[0] is not None)
        firsts = [r["first"] for r in rows if r["snapshot_end_offset"] is None]
        return cls.from_parts(firsts[0] if firsts else None, snapshot_ends)

    @classmethod
    def of_listing(cls, path: str | Path, **options: object) -> Coverage:
        """The coverage of ``source.load(spark, path, **options)`` from the file names alone
        (nothing is opened). The options must be those of the load."""
        from quorum.analytics.source import ReadOptions, list_log_files  # noqa: PLC0415

        texts = {
            key: str(value).lower() if isinstance(value, bool) else str(value)
            for key, value in options.items()
        }
        read = ReadOptions.parse({"path": str(path), **texts})
        segments, checkpoints = list_log_files(read.path)
        end = read.end_offset
        log_start = None
        if segments and (end is None or segments[0].base_offset < end):
            log_start = max(segments[0].base_offset, read.start_offset)
        ends = []
        if read.include_snapshots:
            ends = sorted(
                {
                    c.base_offset
                    for c in checkpoints
                    if read.start_offset <= c.base_offset and (end is None or c.base_offset <= end)
                }
            )
        return cls.from_parts(log_start, ends)

    @classmethod
    def from_parts(cls, log_start: int | None, snapshot_ends: Iterable[int]) -> Coverage:
        """``log_start`` None: no log rows were read."""
        ends = tuple(sorted(set(snapshot_ends)))
        if log_start is None:
            log_start = ends[-1] if ends else 0
        return cls(log_start, ends)

    def _serves_onwards(self, base: int) -> bool:
        """Whether the log rows run without a gap from ``base`` (0: the empty image)."""
        return self.log_start <= base

    def base_for(self, offset: int) -> int:
        """The base of the state as of ``offset``: the end offset E of the snapshot to start
        from, or 0 for the empty image; the log rows at E..``offset`` go on top. Raises
        ``StateNotAvailableError`` if the rows read do not determine that state."""
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        base = max([0, *(end for end in self.snapshot_ends if end <= offset + 1)])
        if base == offset + 1 or self._serves_onwards(base):
            return base
        if base == 0:
            why = f"the log read starts at offset {self.log_start} and no snapshot read ends at "
            why += f"or before offset {offset + 1}"
        else:
            why = (
                f"the newest snapshot at or before it ends at offset {base} (the image as of "
                f"{base - 1}) but the log read starts at offset {self.log_start}, so the records "
                f"{base}..{self.log_start - 1} are gone"
            )
        hint = "" if self.snapshot_ends else " (were the snapshots read? includeSnapshots=true)"
        raise StateNotAvailableError(
            f"the state as of offset {offset} cannot be computed: {why}. {self.describe()}{hint}"
        )

    def available(self) -> tuple[list[int], int | None]:
        """(single offsets, first offset of the open range): the offsets whose state can be
        computed, i.e. each older snapshot's last offset and everything from the oldest base
        the log runs on from (None: no such base)."""
        onwards = [b for b in (0, *self.snapshot_ends) if self._serves_onwards(b)]
        start = max(onwards[0] - 1, 0) if onwards else None
        points = [e - 1 for e in self.snapshot_ends if e > 0 and (start is None or e - 1 < start)]
        return points, start

    def earliest(self) -> int | None:
        """The earliest offset whose state can be computed (None: none)."""
        points, start = self.available()
        candidates = [*points, *([] if start is None else [start])]
        return min(candidates) if candidates else None

    def describe(self) -> str:
        points, start = self.available()
        parts = [f"{p:,}" for p in points]
        if start is not None:
            parts.append(f"{start:,} and later")
        if not parts:
            return "The state as of no offset can be computed from these rows."
        return (
            f"The earliest offset available is {self.earliest():,}; states can be computed "
            f"as of offsets {', '.join(parts)}."
        )

    def oldest_onward_base(self) -> int | None:
        """The oldest base from which the log rows run to the end (None: none does)."""
        onwards = [b for b in (0, *self.snapshot_ends) if self._serves_onwards(b)]
        return onwards[0] if onwards else None


def _from_base(df: DataFrame, base: int, upto: int | None = None) -> DataFrame:
    """The records that rebuild the image from ``base`` (see ``Coverage.base_for``): the
    snapshot ending at ``base`` with its rows placed at offset ``base - 1`` (a snapshot holds one
    record per topic and per partition, so they need no order among them), then the log rows at
    ``base``..``upto``. Base 0 is the empty image: log rows only."""
    log = log_records(df).filter(F.col("offset") >= F.lit(base))
    if upto is not None:
        log = log.filter(F.col("offset") <= F.lit(upto))
    if base == 0:
        return log
    snapshot = df.filter(F.col("snapshot_end_offset") == F.lit(base)).withColumn(
        "offset", F.lit(base - 1).cast("bigint")
    )
    return snapshot.unionByName(log)


# ----- topic lifecycle and name reuse -------------------------------------------------------


def _lifecycle_ms(df: DataFrame) -> DataFrame:
    """Per topic id, in one pass over the log and snapshot rows: its TopicRecord and
    RemoveTopicRecord in the log, what snapshots say of it (TopicRecord, TopicIdentityRecord,
    DeletedTopicRecord), its partitions. The log wins where both know a value (they agree)."""
    rows = df.filter(
        F.col(_TYPE).isin(TOPIC, REMOVE_TOPIC, PARTITION, TOPIC_IDENTITY, DELETED_TOPIC)
    )
    in_log = F.col("snapshot_end_offset").isNull()
    topic, remove, deleted = _is(TOPIC), _is(REMOVE_TOPIC), _is(DELETED_TOPIC)
    snapshot_created = (_is(TOPIC_IDENTITY) | deleted) & ~in_log
    aggregated = rows.groupBy("topic_id").agg(
        F.max(F.when(topic | deleted, F.col("topic.name"))).alias("name"),
        F.coalesce(
            F.min(F.when(topic & in_log, F.col("offset"))),
            F.min(F.when(snapshot_created, F.col("topic.creation_offset"))),
        ).alias("created_offset"),
        F.min(F.when(topic & in_log, F.col("batch_timestamp_ms"))).alias("created_ms"),
        F.max(F.when(topic, F.col("topic.internal"))).alias("internal"),
        F.coalesce(
            F.min(F.when(remove & in_log, F.col("offset"))),
            F.min(F.when(deleted & ~in_log, F.col("topic.deletion_offset"))),
        ).alias("deleted_offset"),
        F.min(F.when(remove & in_log, F.col("batch_timestamp_ms"))).alias("deleted_ms"),
        # Unknown (NULL) for an id known only from a DeletedTopicRecord.
        F.when(
            F.max(topic), F.size(F.collect_set(F.when(_is(PARTITION), F.col("partition.id"))))
        ).alias("partitions"),
    )
    # Ids whose creation is in none of the rows read (a RemoveTopicRecord just after the
    # startOffset, say) have no name to show.
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


def partitions_per_broker_over_time(df: DataFrame, coverage: Coverage | None = None) -> DataFrame:
    """broker_id, offset, time, partitions (replicas hosted), leaders (partitions led): one row
    per offset at which either count of a broker changes, with the counts after that offset.

    Built from PartitionRecord (a new assignment), PartitionChangeRecord (NULL replicas or
    leader: unchanged) and RemoveTopicRecord (every partition of the topic goes away), from the
    oldest base the log runs on from (``Coverage.oldest_onward_base``): a snapshot's partitions
    count at its offset E - 1. If there is no such base (a log that does not start at 0 read
    without its snapshots), the counts start from zero at the log start."""
    coverage = Coverage.of(df) if coverage is None else coverage
    base = coverage.oldest_onward_base()
    log = log_records(df) if base is None else _from_base(df, base)
    changes = log.filter(F.col(_TYPE).isin(PARTITION, PARTITION_CHANGE)).select(
        "topic_id",
        F.col("partition.id").alias("partition"),
        "offset",
        "batch_timestamp_ms",
        F.col("partition.replicas").alias("replicas"),
        F.col("partition.leader").alias("leader"),
    )
    keys = (
        log.filter(_is(PARTITION))
        .select("topic_id", F.col("partition.id").alias("partition"))
        .distinct()
    )
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
        F.col("leader_change.epoch").alias("epoch"),
        F.col("leader_change.leader_id").alias("leader"),
        F.col("leader_change.voters").alias("voters"),
        "offset",
        _time("batch_timestamp_ms").alias("time"),
        F.lead("offset").over(ordered).alias("end_offset"),
        (F.lead("batch_timestamp_ms").over(ordered) - F.col("batch_timestamp_ms")).alias(
            "duration_ms"
        ),
    ).orderBy("offset")


ELECTION_CAUSES: Final = {
    "offline": "no replica could lead (none in the ISR was available)",
    "after_offline": "a leader again after a time without one",
    "previous_leader_fenced": "the leader left the ISR with its leadership (its broker was "
    "fenced: session expired, or controlled shutdown)",
    "preferred": "the first replica took leadership back (ElectLeaders, preferred)",
    "other": "another change (a reassignment)",
}


def partition_elections(df: DataFrame) -> DataFrame:
    """topic_id, partition, offset, time, previous_leader, leader, leader_epoch, cause: one row
    per PartitionChangeRecord that changed a partition's leader. The cause is read from the
    change itself (``ELECTION_CAUSES``): a leader that leaves the ISR in the same record lost
    its broker (the controller takes a fenced broker out of ISRs and leadership together); a
    leader that stays in the ISR gave way to the preferred replica or to a reassignment."""
    rows = (
        log_records(df)
        .filter(F.col(_TYPE).isin(PARTITION, PARTITION_CHANGE))
        .select(
            "topic_id",
            F.col("partition.id").alias("partition"),
            "offset",
            "batch_timestamp_ms",
            F.col(_TYPE).alias("type"),
            F.col("partition.replicas").alias("replicas_set"),
            F.col("partition.isr").alias("isr_set"),
            F.col("partition.leader").alias("leader_set"),
            F.col("partition.leader_epoch").alias("leader_epoch"),
        )
    )
    history = Window.partitionBy("topic_id", "partition").orderBy("offset")
    before = history.rowsBetween(Window.unboundedPreceding, -1)
    so_far = history.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    states = rows.select(
        "topic_id",
        "partition",
        "offset",
        "batch_timestamp_ms",
        "type",
        "leader_set",
        "leader_epoch",
        F.last("leader_set", ignorenulls=True).over(before).alias("previous_leader"),
        F.last("isr_set", ignorenulls=True).over(so_far).alias("isr"),
        F.last("replicas_set", ignorenulls=True).over(so_far).alias("replicas"),
    )
    changed = states.filter(
        (F.col("type") == PARTITION_CHANGE)
        & F.col("leader_set").isNotNull()
        & (F.col("leader_set") != F.col("previous_leader"))
    )
    cause = (
        F.when(F.col("leader_set") == NO_LEADER, "offline")
        .when(F.col("previous_leader") == NO_LEADER, "after_offline")
        .when(~F.array_contains("isr", F.col("previous_leader")), "previous_leader_fenced")
        .when(F.col("leader_set") == F.element_at("replicas", 1), "preferred")
        .otherwise("other")
    )
    return changed.select(
        "topic_id",
        "partition",
        "offset",
        _time("batch_timestamp_ms").alias("time"),
        "previous_leader",
        F.col("leader_set").alias("leader"),
        "leader_epoch",
        cause.alias("cause"),
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
            F.col("broker.id").alias("broker_id"),
            event[F.col(_TYPE)].alias("event"),
            "offset",
            _time("batch_timestamp_ms").alias("time"),
            F.col("broker.epoch").alias("broker_epoch"),
            *[F.col(f"broker.{field}").alias(field) for field in _REGISTRATION_FIELDS],
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


def state_as_of(df: DataFrame, offset: int, coverage: Coverage | None = None) -> DataFrame:
    """The topics and partitions of the image after every record at or below ``offset``: one
    row per (topic_id, partition) with the columns of ``STATE_COLUMNS``.

    The image is rebuilt from a base (``Coverage.base_for``: the newest snapshot ending at or
    before ``offset + 1``, or the empty image) plus the log rows after it up to ``offset``;
    ``StateNotAvailableError`` if the rows read do not determine it. Without ``coverage`` it is
    computed from ``df`` with one small action (see the module docstring).

    Replay rules (as the controller's image applies them): a TopicRecord creates the id, a
    RemoveTopicRecord removes the topic and its partitions; the last PartitionRecord of a
    partition sets all its fields and each later PartitionChangeRecord overwrites the fields it
    does not leave NULL (last writer wins per field). A topic with no partition yet (``offset``
    inside its creation batch) has one row with NULL partition fields. Rows are ordered by
    name and partition, so they compare directly with an image dumped the same way.
    """
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")
    coverage = Coverage.of(df) if coverage is None else coverage
    upto = _from_base(df, coverage.base_for(offset), offset)
    topics = (
        upto.filter(F.col(_TYPE).isin(TOPIC, REMOVE_TOPIC))
        .groupBy("topic_id")
        .agg(
            F.max(F.when(_is(TOPIC), F.col("topic.name"))).alias("name"),
            F.max(F.when(_is(TOPIC), F.col("topic.internal"))).alias("internal"),
            F.max(_is(REMOVE_TOPIC)).alias("removed"),
        )
        .filter(F.col("name").isNotNull() & ~F.col("removed"))
        .drop("removed")
    )
    changes = upto.filter(F.col(_TYPE).isin(PARTITION, PARTITION_CHANGE)).select(
        "topic_id",
        "offset",
        _TYPE,
        F.col("partition.id").alias("partition"),
        *[F.col(f"partition.{field}").alias(field) for field in _PARTITION_FIELDS],
    )
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


ACL_COLUMNS: Final = (
    "acl_id",
    "resource_type",
    "resource_name",
    "pattern_type",
    "principal",
    "host",
    "operation",
    "permission_type",
)
# Kafka's enum codes as names (quorum.security.acls), for readable ACL rows: every code a
# stored ACL can have (GROUP and READ included: consumer groups, docs/groups.md).
_ACL_NAMES: Final = {
    "resource_type": {2: "TOPIC", 3: "GROUP", 4: "CLUSTER"},
    "pattern_type": {3: "LITERAL", 4: "PREFIXED"},
    "operation": {
        2: "ALL", 3: "READ", 4: "WRITE", 5: "CREATE", 6: "DELETE", 7: "ALTER", 8: "DESCRIBE",
        9: "CLUSTER_ACTION", 10: "DESCRIBE_CONFIGS", 11: "ALTER_CONFIGS", 12: "IDEMPOTENT_WRITE",
    },
    "permission_type": {2: "DENY", 3: "ALLOW"},
}  # fmt: skip


def _named(column: str) -> Column:
    mapping = F.create_map(*[F.lit(x) for kv in _ACL_NAMES[column].items() for x in kv])
    return F.coalesce(mapping[F.col(f"acl.{column}")], F.col(f"acl.{column}").cast("string"))


def acls_as_of(df: DataFrame, offset: int, coverage: Coverage | None = None) -> DataFrame:
    """The ACLs of the image after every record at or below ``offset`` (docs/authorization.md):
    one row per ACL with ``ACL_COLUMNS``, enum codes as Kafka's names, from the same base as
    ``state_as_of`` (a snapshot's ACLs, then the log's AccessControlEntryRecords minus those a
    RemoveAccessControlEntryRecord removed)."""
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")
    coverage = Coverage.of(df) if coverage is None else coverage
    upto = _from_base(df, coverage.base_for(offset), offset)
    removed = upto.filter(_is(REMOVE_ACL)).select(F.col("acl.id").alias("acl_id")).distinct()
    return (
        upto.filter(_is(ACL))
        .withColumn("acl_id", F.col("acl.id"))
        .join(removed, "acl_id", "left_anti")
        .select(
            "acl_id",
            _named("resource_type").alias("resource_type"),
            F.col("acl.resource_name").alias("resource_name"),
            _named("pattern_type").alias("pattern_type"),
            F.col("acl.principal").alias("principal"),
            F.col("acl.host").alias("host"),
            _named("operation").alias("operation"),
            _named("permission_type").alias("permission_type"),
        )
        .orderBy("resource_type", "resource_name", "principal", "operation", "acl_id")
    )


VOTER_COLUMNS: Final = ("voter_id", "directory_id", "endpoints", "since_offset")
_VOTER_SET_SCHEMA: Final = "array<struct<id:int,directoryId:string,endpoints:array<string>>>"


def voters_as_of(df: DataFrame, offset: int, coverage: Coverage | None = None) -> DataFrame:
    """The voter set in force after every record at or below ``offset`` (KIP-853), one row per
    voter with ``VOTER_COLUMNS`` (``since_offset``: the offset of the record that set it), from
    the same base as ``state_as_of``: the last ``VotersRecord`` there (in the log, or the one
    the base snapshot holds, placed at its end offset - 1). A static quorum (kraft.version 0)
    writes none: its voters are then the last ``LeaderChangeMessage``'s, without directory ids
    or endpoints. Empty when neither is found. One small action decides which applies."""
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")
    coverage = Coverage.of(df) if coverage is None else coverage
    upto = _from_base(df, coverage.base_for(offset), offset)
    last = upto.filter(_is(VOTERS)).orderBy(F.col("offset").desc()).limit(1)
    if last.count():
        voter = F.explode(F.from_json(F.col("voters.voter_set"), _VOTER_SET_SCHEMA)).alias("voter")
        return (
            last.select(F.col("offset").alias("since_offset"), voter)
            .select(
                F.col("voter.id").alias("voter_id"),
                F.col("voter.directoryId").alias("directory_id"),
                F.col("voter.endpoints").alias("endpoints"),
                "since_offset",
            )
            .orderBy("voter_id")
        )
    static = upto.filter(_is(LEADER_CHANGE)).orderBy(F.col("offset").desc()).limit(1)
    return (
        static.select(
            F.col("offset").alias("since_offset"),
            F.explode("leader_change.voters").alias("voter_id"),
        )
        .select(
            "voter_id",
            F.lit(None).cast("string").alias("directory_id"),
            F.lit(None).cast("array<string>").alias("endpoints"),
            "since_offset",
        )
        .orderBy("voter_id")
    )


def _without_coverage(job: Callable[[DataFrame], DataFrame]) -> _Job:
    def run(df: DataFrame, coverage: Coverage) -> DataFrame:
        del coverage  # the job reads the log rows only, or every snapshot row
        return job(df)

    return run


_Job = Callable[["DataFrame", Coverage], "DataFrame"]

JOBS: Final[dict[str, _Job]] = {
    "topic_lifecycle": _without_coverage(topic_lifecycle),
    "name_reuse": _without_coverage(name_reuse),
    "partitions_per_broker_over_time": partitions_per_broker_over_time,
    "leadership_timeline": _without_coverage(leadership_timeline),
    "partition_elections": _without_coverage(partition_elections),
    "broker_events": _without_coverage(broker_events),
}
"""The full-history jobs by output name, each called as ``job(df, coverage)`` (``state_as_of``
takes an offset too)."""
