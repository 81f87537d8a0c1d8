"""The metadata image as the records of a snapshot, and back (KIP-630). Pure: no I/O.

``image_to_records(image)`` lists the records that rebuild ``image`` from nothing, and
``image_from_records(records, end_offset=image.offset + 1)`` (or ``image_from_batches``) replays
them through ``MetadataDelta`` in snapshot mode, giving an image equal to ``image`` in every
field: topics with their configs and partitions (replicas, ISR, leader, both epochs), brokers
(incarnation, epoch, endpoints, rack, fenced), broker and cluster configs, the ACLs, the client
quotas, the next producer-id block, the metadata
topic's id, and topic identity: each live topic's creation offset and every removed topic (id, name,
creation and deletion offsets), so that ids stay never reused across a snapshot.

Record order (deterministic, so two controllers with equal images write equal snapshots)::

    RegisterBrokerRecord            per broker, by broker id (``fenced`` carries the state)
    ConfigRecord(BROKER, ...)       per broker config, by resource name ("" = cluster) and key
    AccessControlEntryRecord        per ACL, by id
    ClientQuotaRecord               per client quota entity (sorted) and key
    ProducerIdsRecord               the next producer-id block (broker id and epoch -1), once
                                    any block was handed out
    DeletedTopicRecord              per removed topic, by deletion offset
    per live topic, by creation offset:
        TopicRecord                 name, id, internal
        TopicIdentityRecord         its creation offset (must follow its TopicRecord)
        ConfigRecord(TOPIC, ...)    by key
        PartitionRecord             by partition

``SnapshotBatchBuilder`` (``snapshot_batches`` in one go) wraps such records into the batches
of a ``.checkpoint`` file: a control batch holding ``SnapshotHeader`` first, the records in
batches of at most ``limits.RECORDS_PER_BATCH_MAX`` records and ``limits.BATCH_BYTES_MAX`` bytes,
then a control batch holding ``SnapshotFooter``. As in Kafka, the offsets of a snapshot's batches
are positions inside the snapshot (the header is offset 0, records follow from 1) and every batch
carries the snapshot's epoch; the end offset of the log the snapshot covers is in its file name
only.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Final

from quorum import limits
from quorum.metadata.batch import DecodedBatch, LogBatch, encode_batch
from quorum.metadata.delta import MetadataDelta
from quorum.metadata.image import MetadataImage, TopicImage
from quorum.metadata.records import (
    ClientQuotaEntityData,
    ClientQuotaRecord,
    ConfigRecord,
    ConfigResourceType,
    DeletedTopicRecord,
    MetadataRecord,
    PartitionRecord,
    ProducerIdsRecord,
    Record,
    RegisterBrokerRecord,
    SnapshotFooter,
    SnapshotHeader,
    TopicIdentityRecord,
    TopicRecord,
)
from quorum.security.acls import acl_record

__all__ = [
    "SNAPSHOT_FOOTER_VERSION",
    "SNAPSHOT_HEADER_VERSION",
    "SnapshotBatchBuilder",
    "image_from_batches",
    "image_from_records",
    "image_to_records",
    "snapshot_batches",
    "snapshot_end_offset",
]

SNAPSHOT_HEADER_VERSION: Final = 0
"""``SnapshotHeader.version`` written and read (KIP-630's header version 0)."""
SNAPSHOT_FOOTER_VERSION: Final = 0
"""``SnapshotFooter.version`` written and read."""


def snapshot_end_offset(image: MetadataImage) -> int:
    """The end offset of a snapshot of ``image``: just past the last record it contains."""
    return image.offset + 1


def _sort_key(name: str) -> tuple[int, int, str]:
    """Config resource names: the cluster default ``""``, broker ids in numeric order, then any
    other text."""
    if not name:
        return (0, 0, "")
    if name.isascii() and name.isdigit():
        return (1, int(name), "")
    return (2, 0, name)


def _entity_sort_key(entity: tuple[tuple[str, str | None], ...]) -> list[tuple[str, str]]:
    """Client quota entities: by type, a default (None) before any name."""
    return [(kind, "" if name is None else "\0" + name) for kind, name in entity]


def image_to_records(image: MetadataImage) -> Iterator[MetadataRecord]:
    """The records that rebuild ``image`` from the empty image (see the module docstring).

    A generator: a caller streaming them into a snapshot never holds them all at once.
    """
    for broker_id in sorted(image.brokers):
        broker = image.brokers[broker_id]
        yield RegisterBrokerRecord(
            broker_id=broker.broker_id,
            incarnation_id=broker.incarnation_id,
            broker_epoch=broker.broker_epoch,
            endpoints=broker.endpoints,
            rack=broker.rack,
            fenced=broker.fenced,
        )
    for acl_id in sorted(image.acls, key=lambda i: i.bytes):
        yield acl_record(acl_id, image.acls[acl_id])
    for entity in sorted(image.client_quotas, key=_entity_sort_key):
        values = image.client_quotas[entity]
        for key in sorted(values):
            yield ClientQuotaRecord(
                tuple(ClientQuotaEntityData(kind, name) for kind, name in entity),
                key,
                values[key],
                remove=False,
            )
    for resource in sorted(image.broker_configs, key=_sort_key):
        configs = image.broker_configs[resource]
        for name in sorted(configs):
            yield ConfigRecord(ConfigResourceType.BROKER, resource, name, configs[name])
    if image.next_producer_id > 0:
        yield ProducerIdsRecord(
            broker_id=-1, broker_epoch=-1, next_producer_id=image.next_producer_id
        )
    deleted = sorted(
        image.deleted_topics.values(), key=lambda d: (d.deletion_offset, d.creation_offset)
    )
    for gone in deleted:
        yield DeletedTopicRecord(
            name=gone.name,
            topic_id=gone.topic_id,
            creation_offset=gone.creation_offset,
            deletion_offset=gone.deletion_offset,
        )
    topics = sorted(image.topics_by_id.values(), key=lambda t: t.creation_offset)
    for topic in topics:
        yield from _topic_records(topic)


def _topic_records(topic: TopicImage) -> Iterator[MetadataRecord]:
    topic_id = topic.topic_id
    yield TopicRecord(name=topic.name, topic_id=topic_id, internal=topic.internal)
    yield TopicIdentityRecord(topic_id=topic_id, creation_offset=topic.creation_offset)
    configs = topic.configs
    for name in sorted(configs):
        yield ConfigRecord(ConfigResourceType.TOPIC, topic.name, name, configs[name])
    partitions = topic.partitions
    for partition in sorted(partitions):
        state = partitions[partition]
        yield PartitionRecord(
            topic_id,
            state.partition,
            state.replicas,
            state.isr,
            state.leader,
            state.leader_epoch,
            state.partition_epoch,
        )


def image_from_records(records: Iterable[Record], *, end_offset: int) -> MetadataImage:
    """The image a snapshot ending at ``end_offset`` holding ``records`` describes.

    ``records`` may include the snapshot's header and footer. Raises ``MetadataReplayError``
    for a record stream that is not a consistent state (see ``quorum.metadata.delta``).
    """
    delta = MetadataDelta(MetadataImage.EMPTY, snapshot_end_offset=end_offset)
    for position, record in enumerate(records):
        delta.replay(record, position)
    return delta.apply()


def image_from_batches(batches: Iterable[DecodedBatch], *, end_offset: int) -> MetadataImage:
    """``image_from_records`` over the decoded batches of a snapshot, in file order."""
    delta = MetadataDelta(MetadataImage.EMPTY, snapshot_end_offset=end_offset)
    for batch in batches:
        delta.replay_batch(batch)
    return delta.apply()


class SnapshotBatchBuilder:
    """Cuts a stream of records into the batches of a snapshot file (see the module docstring).

    ``header()`` first (once), then ``add(record)`` for each record, which returns the batches
    completed by it (usually none), then ``finish()`` for the rest and the footer. Offsets are
    positions inside the snapshot (header 0); every batch has the snapshot's ``epoch`` and the
    timestamp ``last_contained_log_timestamp_ms`` (that of the last batch the snapshot covers,
    also written in the header: Kafka's ``lastContainedLogTimestamp``, which
    ``metadata.max.retention.ms`` ages). A batch holds at most ``records_per_batch_max`` records
    and ``limits.BATCH_BYTES_MAX`` bytes of encoded data.
    """

    def __init__(
        self,
        *,
        epoch: int,
        last_contained_log_timestamp_ms: int,
        records_per_batch_max: int = limits.RECORDS_PER_BATCH_MAX,
    ) -> None:
        if not 1 <= records_per_batch_max <= limits.RECORDS_PER_BATCH_MAX:
            raise ValueError(f"records_per_batch_max {records_per_batch_max} out of range")
        self._epoch = epoch
        self._timestamp_ms = last_contained_log_timestamp_ms
        self._records_per_batch_max = records_per_batch_max
        self._next_offset = 0
        self._pending: list[Record] = []
        self._finished = False

    def header(self, voters: Sequence[Record] = ()) -> LogBatch:
        """The control batch holding ``SnapshotHeader`` (position 0), then ``voters``: the
        ``KRaftVersionRecord`` and ``VotersRecord`` in force at the snapshot's end offset, for
        a quorum whose voters live in the log (KIP-853; Kafka writes them right after the
        header too)."""
        assert self._next_offset == 0, "the header is the first batch, written once"
        header = SnapshotHeader(SNAPSHOT_HEADER_VERSION, self._timestamp_ms)
        return self._control_batch(header, *voters)

    def add(self, record: Record) -> list[LogBatch]:
        """Take one record; returns the batches it completed (most calls: none)."""
        assert self._next_offset > 0, "header() comes first"
        assert not self._finished, "add after finish"
        self._pending.append(record)
        if len(self._pending) < self._records_per_batch_max:
            return []
        return self._flush()

    def finish(self) -> list[LogBatch]:
        """The batches of the records still pending, then the footer's control batch."""
        assert self._next_offset > 0, "header() comes first"
        assert not self._finished, "finish twice"
        batches = self._flush()
        batches.append(self._control_batch(SnapshotFooter(SNAPSHOT_FOOTER_VERSION)))
        self._finished = True
        return batches

    def _control_batch(self, *records: Record) -> LogBatch:
        batch = encode_batch(
            base_offset=self._next_offset,
            epoch=self._epoch,
            timestamp_ms=self._timestamp_ms,
            records=records,
            control=True,
        )
        self._next_offset = batch.end_offset
        return batch

    def _flush(self) -> list[LogBatch]:
        if not self._pending:
            return []
        batches = _bounded_batches(
            self._pending, self._next_offset, self._epoch, self._timestamp_ms
        )
        self._pending = []
        self._next_offset = batches[-1].end_offset
        return batches


def snapshot_batches(
    records: Iterable[Record],
    *,
    epoch: int,
    last_contained_log_timestamp_ms: int,
    records_per_batch_max: int = limits.RECORDS_PER_BATCH_MAX,
) -> Iterator[LogBatch]:
    """Every batch of a snapshot holding ``records`` (``SnapshotBatchBuilder`` in one go)."""
    builder = SnapshotBatchBuilder(
        epoch=epoch,
        last_contained_log_timestamp_ms=last_contained_log_timestamp_ms,
        records_per_batch_max=records_per_batch_max,
    )
    yield builder.header()
    for record in records:
        yield from builder.add(record)
    yield from builder.finish()


def _bounded_batches(
    records: Sequence[Record], base_offset: int, epoch: int, timestamp_ms: int
) -> list[LogBatch]:
    """``records`` as one batch, or halves of it (recursively) while one exceeds the byte cap.

    Records are small (a partition is ~50 bytes), so the split is for pathological configs or
    endpoint lists only; a single record over the cap cannot be written at all.
    """
    batch = encode_batch(
        base_offset=base_offset, epoch=epoch, timestamp_ms=timestamp_ms, records=records
    )
    if len(batch.data) <= limits.BATCH_BYTES_MAX:
        return [batch]
    if len(records) == 1:
        raise ValueError(
            f"a {type(records[0]).__name__} of {len(batch.data)} bytes exceeds the batch limit "
            f"of {limits.BATCH_BYTES_MAX} bytes"
        )
    half = len(records) // 2
    first = _bounded_batches(records[:half], base_offset, epoch, timestamp_ms)
    second = _bounded_batches(records[half:], base_offset + half, epoch, timestamp_ms)
    return first + second
