"""Replaying records onto an image: ``MetadataDelta(image).replay(record, offset)``, ``apply()``.

Kafka's ``MetadataDelta`` / ``TopicsDelta``: a delta collects the changes of any number of
records on top of one immutable image, and ``apply()`` builds the next image sharing everything
that did not change (see ``quorum.metadata.image``). The controller, the brokers and the Spark
replay all go through this one code path.

Replay is strict. A record that cannot follow the image it is replayed on (a ``TopicRecord``
whose name is live or whose id is live or among the retained deleted ones
(docs/architecture.md#deleted-topic-ids), a record for an unknown topic, partition or broker, a
stale broker epoch, an offset that does not grow) means the log is corrupt or the
controller has a bug; ``replay`` raises ``MetadataReplayError`` (an ``AssertionError``,
docs/conventions.md#errors) naming the offset and the record, and the process should crash rather
than serve an image that differs from everyone else's.

Offsets: ``replay`` needs strictly increasing offsets. Control records (``LeaderChangeMessage``,
snapshot header/footer) and ``NoOpRecord`` only advance the offset.

Snapshots (``MetadataDelta(MetadataImage.EMPTY, snapshot_end_offset=N)``). A snapshot holds the
image as of its last contained offset ``N - 1``, not a history, so a delta in snapshot mode
replays every record *as of* ``N - 1`` and its image's ``offset`` is ``N - 1``; the offsets a
snapshot's batches carry are positions inside the file (they must still grow). Only the records
a state needs are accepted: ``TopicRecord`` (each immediately followed by the
``TopicIdentityRecord`` that gives its creation offset), ``DeletedTopicRecord``,
``PartitionRecord``, ``ConfigRecord``, ``RegisterBrokerRecord`` (which carries the fenced
state), ``ProducerIdsRecord`` (the next producer-id block) and the snapshot header/footer;
change records (``PartitionChangeRecord``, ``RemoveTopicRecord``, broker fencing, ...) are
refused there, and the snapshot-only records are refused everywhere else.
``quorum.metadata.snapshot_records`` writes such record streams.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from quorum.ids import RESERVED_UUIDS, Uuid
from quorum.limits import DELETED_TOPICS_RETAINED_MAX
from quorum.metadata.batch import DecodedBatch
from quorum.metadata.client_quotas import client_quota_entity_problem, entity_key
from quorum.metadata.image import (
    CLUSTER_METADATA_TOPIC_NAME,
    NO_LEADER,
    BrokerImage,
    DeletedTopic,
    DeletedTopics,
    MetadataImage,
    PartitionImage,
    PersistentMap,
    TopicImage,
    empty_map,
    has_collision_chars,
    topic_collision_key,
)
from quorum.metadata.records import (
    AccessControlEntryRecord,
    ClientQuotaRecord,
    ConfigRecord,
    ConfigResourceType,
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
from quorum.security.acls import AclBinding, binding_from_record

__all__ = [
    "LocalReplicaChanges",
    "LocalTopicPartitions",
    "MetadataDelta",
    "MetadataReplayError",
    "replay_batches",
    "replay_records",
]


class MetadataReplayError(AssertionError):
    """A record that cannot follow the image: a corrupt log or a controller bug. Crash."""

    def __init__(self, offset: int, record: Record, reason: str) -> None:
        super().__init__(f"cannot replay {record!r} at offset {offset}: {reason}")
        self.offset = offset
        self.record = record
        self.reason = reason


# ----- local changes (what one broker must create and delete) -------------------------------


@dataclass(frozen=True, slots=True)
class LocalTopicPartitions:
    """Partitions of one topic (by id) that a broker gains or loses."""

    topic_id: Uuid
    name: str
    partitions: frozenset[int]


@dataclass(frozen=True, slots=True)
class LocalReplicaChanges:
    """Kafka's ``LocalReplicaChanges``, reduced to what reconciliation needs.

    ``creates``: partitions newly assigned to the broker (topic created, or a replica moved
    here). ``deletes``: partitions it no longer hosts (topic removed, or replica moved away),
    named by the topic id and the name they had. Both are keyed by topic id; a topic created
    and removed within one delta appears in neither. A deleted name recreated in the same delta
    is two entries: the old id in ``deletes``, the new id in ``creates``.
    """

    creates: Mapping[Uuid, LocalTopicPartitions]
    deletes: Mapping[Uuid, LocalTopicPartitions]

    @property
    def is_empty(self) -> bool:
        return not self.creates and not self.deletes


# ----- the delta ----------------------------------------------------------------------------


class _TopicChange:
    """A live topic touched by the delta: created here (``base is None``) or changed."""

    __slots__ = ("base", "configs", "creation_offset", "internal", "name", "partitions", "topic_id")

    def __init__(
        self,
        *,
        base: TopicImage | None,
        name: str,
        topic_id: Uuid,
        internal: bool,
        creation_offset: int,
    ) -> None:
        self.base = base
        self.name = name
        self.topic_id = topic_id
        self.internal = internal
        self.creation_offset = creation_offset
        self.partitions: dict[int, PartitionImage] = {}
        self.configs: dict[str, str | None] = {}  # None: the config was deleted

    def partition(self, partition: int) -> PartitionImage | None:
        found = self.partitions.get(partition)
        if found is None and self.base is not None:
            found = self.base.partitions.get(partition)
        return found

    def build(self) -> TopicImage:
        base = self.base
        config_puts = {k: v for k, v in self.configs.items() if v is not None}
        config_removes = [k for k, v in self.configs.items() if v is None]
        if base is None:
            return TopicImage(
                name=self.name,
                topic_id=self.topic_id,
                internal=self.internal,
                creation_offset=self.creation_offset,
                partitions=PersistentMap(self.partitions),
                configs=PersistentMap(config_puts),
            )
        partitions = base.partitions
        if self.partitions:
            assert isinstance(partitions, PersistentMap), partitions
            partitions = partitions.updated(self.partitions)
        configs = base.configs
        if self.configs:
            assert isinstance(configs, PersistentMap), configs
            configs = configs.updated(config_puts, config_removes)
        return TopicImage(
            name=base.name,
            topic_id=base.topic_id,
            internal=base.internal,
            creation_offset=base.creation_offset,
            partitions=partitions,
            configs=configs,
        )


def _check_partition_state(state: PartitionImage) -> str | None:
    """Why a partition state is impossible, or None if it is fine."""
    replicas, isr, leader = state.replicas, state.isr, state.leader
    replica_set = set(replicas)
    if not replicas:
        return "a partition has at least one replica"
    if len(replica_set) != len(replicas):
        return f"replicas {list(replicas)} repeat a broker"
    if not isr:
        return "the ISR is never empty (its last member stays when it is fenced)"
    if isr != replicas and (len(set(isr)) != len(isr) or not replica_set.issuperset(isr)):
        return f"ISR {list(isr)} is not a set of distinct replicas of {list(replicas)}"
    if leader != NO_LEADER and leader not in isr:
        return f"leader {leader} is not in the ISR {list(isr)}"
    return None


_Handler = Callable[[Any, Any, int], None]
KT = TypeVar("KT")
VT = TypeVar("VT")


class MetadataDelta:
    """Changes replayed on top of ``image``; ``apply()`` returns the next image.

    A delta may be applied any number of times (each ``apply`` reflects the records so far),
    and replay may continue after ``apply``: the driver of a broker can publish an image per
    batch from one long-lived delta or start a fresh delta per batch.

    With ``snapshot_end_offset`` the delta loads a snapshot ending at that offset onto the
    empty image (see the module docstring): ``offset`` is ``snapshot_end_offset - 1`` from the
    start, and the offsets given to ``replay`` are positions inside the snapshot.

    ``apply`` keeps the newest ``deleted_topics_retained_max`` deletions in
    ``deleted_topics`` (docs/architecture.md#deleted-topic-ids). Every node must use the same
    bound, so only tests pass another.
    """

    def __init__(
        self,
        image: MetadataImage,
        *,
        snapshot_end_offset: int | None = None,
        deleted_topics_retained_max: int = DELETED_TOPICS_RETAINED_MAX,
    ) -> None:
        self._image = image
        self._deleted_topics_retained_max = deleted_topics_retained_max
        self._offset = image.offset
        self._snapshot_end_offset = snapshot_end_offset
        # Snapshot mode: the last position replayed, and a TopicRecord whose TopicIdentityRecord
        # must come next.
        self._position = -1
        self._awaiting_identity: tuple[TopicRecord, int] | None = None
        if snapshot_end_offset is not None:
            if type(snapshot_end_offset) is not int or snapshot_end_offset < 0:
                raise ValueError(
                    f"snapshot_end_offset must be an int >= 0: {snapshot_end_offset!r}"
                )
            if image != MetadataImage.EMPTY:
                raise ValueError(
                    f"a snapshot loads onto the empty image, not one at offset {image.offset}"
                )
            self._offset = snapshot_end_offset - 1
        self._topics: dict[Uuid, _TopicChange] = {}
        self._removed: dict[Uuid, DeletedTopic] = {}
        # Removals in this delta whose id was forgotten and then taken by a new topic (see
        # _is_topic_id_used): they still count toward the bound.
        self._revived: list[DeletedTopic] = []
        self._names: dict[str, Uuid | None] = {}  # None: the name was freed in this delta
        self._brokers: dict[int, BrokerImage | None] = {}  # None: unregistered
        self._broker_configs: dict[str, dict[str, str | None]] = {}
        self._acls: dict[Uuid, AclBinding | None] = {}  # None: removed in this delta
        # Client quota entity -> key -> value (None: removed in this delta).
        self._client_quotas: dict[tuple[tuple[str, str | None], ...], dict[str, float | None]] = {}
        self._metadata_topic_id = image.metadata_topic_id
        self._next_producer_id = image.next_producer_id
        # Plain functions called as handler(self, record, offset), from a table built once:
        # a dict of bound methods on self would be a reference cycle, leaving every delta (and
        # the topics, partitions and images it holds) to the cyclic garbage collector.
        self._handlers: Final[Mapping[type, _Handler]] = (
            _LOG_HANDLERS if snapshot_end_offset is None else _SNAPSHOT_HANDLERS
        )

    @property
    def image(self) -> MetadataImage:
        """The image this delta started from."""
        return self._image

    @property
    def offset(self) -> int:
        """The offset of the last record replayed (the image's offset before any); in snapshot
        mode the snapshot's last contained offset."""
        return self._offset

    @property
    def snapshot_end_offset(self) -> int | None:
        """The end offset of the snapshot this delta loads, or None for log replay."""
        return self._snapshot_end_offset

    # ----- replay -----------------------------------------------------------------------------

    def replay(self, record: Record, offset: int) -> None:
        """Apply one record at ``offset``; raises ``MetadataReplayError`` if it is impossible.

        In snapshot mode ``offset`` is the record's position inside the snapshot."""
        if self._snapshot_end_offset is not None:
            self._replay_in_snapshot(record, offset)
            return
        if offset <= self._offset:
            raise MetadataReplayError(
                offset, record, f"offsets must grow: the last record replayed is at {self._offset}"
            )
        handler = self._handlers.get(type(record))
        if handler is None:
            raise MetadataReplayError(offset, record, "not a record type replay knows")
        handler(self, record, offset)
        self._offset = offset

    def replay_batch(self, batch: DecodedBatch) -> None:
        """``replay`` every record of ``batch`` at its offset (one offset check per batch)."""
        if self._snapshot_end_offset is not None:
            for position, record in enumerate(batch.records, start=batch.base_offset):
                self._replay_in_snapshot(record, position)
            return
        if batch.base_offset <= self._offset:
            raise MetadataReplayError(
                batch.base_offset,
                batch.records[0],
                f"offsets must grow: the last record replayed is at {self._offset}",
            )
        handlers = self._handlers
        offset = batch.base_offset
        for record in batch.records:
            handler = handlers.get(type(record))
            if handler is None:
                raise MetadataReplayError(offset, record, "not a record type replay knows")
            handler(self, record, offset)
            self._offset = offset
            offset += 1

    def _replay_in_snapshot(self, record: Record, position: int) -> None:
        """Replay one record of a snapshot (at ``position`` in it) as of its last offset."""
        offset = self._offset
        if position <= self._position:
            raise MetadataReplayError(
                offset,
                record,
                f"positions in a snapshot must grow: position {position} after {self._position}",
            )
        awaiting = self._awaiting_identity
        if awaiting is not None and (
            type(record) is not TopicIdentityRecord or record.topic_id != awaiting[0].topic_id
        ):
            raise MetadataReplayError(
                offset,
                record,
                f"the TopicRecord of {awaiting[0].name!r} at position {awaiting[1]} of the "
                "snapshot must be followed by its TopicIdentityRecord",
            )
        handler = self._handlers.get(type(record))
        if handler is None:
            raise MetadataReplayError(
                offset,
                record,
                "not a record a snapshot holds (a snapshot is a state: topics with their "
                "identity, deleted topics, partitions, configs, brokers)",
            )
        handler(self, record, offset)
        self._position = position
        if type(record) is TopicRecord:
            self._awaiting_identity = (record, position)

    # ----- lookups across the delta and its image --------------------------------------------

    def _live_topic_for_update(self, topic_id: Uuid) -> _TopicChange | None:
        change = self._topics.get(topic_id)
        if change is not None:
            return change
        if topic_id in self._removed:
            return None
        base = self._image.topics_by_id.get(topic_id)
        if base is None:
            return None
        change = _TopicChange(
            base=base,
            name=base.name,
            topic_id=topic_id,
            internal=base.internal,
            creation_offset=base.creation_offset,
        )
        self._topics[topic_id] = change
        return change

    def _topic_id_by_name(self, name: str) -> Uuid | None:
        if name in self._names:
            return self._names[name]
        return self._image.topics_by_name.get(name)

    def _is_topic_id_used(self, topic_id: Uuid) -> bool:
        """Whether ``topic_id`` is live or among the retained deletions *at this record*: the
        newest ``deleted_topics_retained_max`` of the image's and this delta's, so a delta of
        many batches refuses exactly what one delta per batch would (in a snapshot, any id
        twice is refused)."""
        if topic_id in self._topics:
            return True
        if topic_id in self._removed:
            if self._snapshot_end_offset is not None:
                return True
            # In offset order; a rare path (an id coming back), so a linear scan is fine.
            newer = len(self._removed) - 1 - list(self._removed).index(topic_id)
            return newer < self._deleted_topics_retained_max
        deleted = self._image.deleted_topics
        if topic_id in deleted:
            assert isinstance(deleted, DeletedTopics), type(deleted)
            newer = len(self._removed) + len(self._revived) + deleted.newer_than(topic_id)
            return newer < self._deleted_topics_retained_max
        return topic_id in self._image.topics_by_id

    def _broker(self, broker_id: int) -> BrokerImage | None:
        if broker_id in self._brokers:
            return self._brokers[broker_id]
        return self._image.brokers.get(broker_id)

    # ----- topics -----------------------------------------------------------------------------

    def _replay_topic(self, record: TopicRecord, offset: int) -> None:
        name, topic_id = record.name, record.topic_id
        if topic_id in RESERVED_UUIDS:
            raise MetadataReplayError(offset, record, f"{topic_id} is a reserved id")
        live_id = self._topic_id_by_name(name)
        if live_id is not None:
            raise MetadataReplayError(offset, record, f"topic {name!r} exists with id {live_id}")
        if self._is_topic_id_used(topic_id):
            raise MetadataReplayError(
                offset, record, f"topic id {topic_id} was used before; ids are never reused"
            )
        revived = self._removed.pop(topic_id, None)
        if revived is not None:  # removed in this delta, forgotten since
            self._revived.append(revived)
        if name == CLUSTER_METADATA_TOPIC_NAME:
            if not record.internal:
                raise MetadataReplayError(offset, record, "the metadata topic is internal")
            self._metadata_topic_id = topic_id
        self._topics[topic_id] = _TopicChange(
            base=None,
            name=name,
            topic_id=topic_id,
            internal=record.internal,
            creation_offset=offset,
        )
        self._names[name] = topic_id

    def _replay_topic_identity(self, record: TopicIdentityRecord, offset: int) -> None:
        awaiting = self._awaiting_identity
        if awaiting is None:
            raise MetadataReplayError(
                offset, record, "a TopicIdentityRecord follows the TopicRecord of its topic"
            )
        if record.creation_offset > offset:
            raise MetadataReplayError(
                offset,
                record,
                f"creation offset {record.creation_offset} is past the snapshot's last offset",
            )
        change = self._topics[record.topic_id]
        assert change.base is None, change
        change.creation_offset = record.creation_offset
        self._awaiting_identity = None

    def _replay_deleted_topic(self, record: DeletedTopicRecord, offset: int) -> None:
        topic_id = record.topic_id
        if topic_id in RESERVED_UUIDS:
            raise MetadataReplayError(offset, record, f"{topic_id} is a reserved id")
        if self._is_topic_id_used(topic_id):
            raise MetadataReplayError(
                offset, record, f"topic id {topic_id} appears twice in the snapshot"
            )
        if record.deletion_offset > offset:
            raise MetadataReplayError(
                offset,
                record,
                f"deletion offset {record.deletion_offset} is past the snapshot's last offset",
            )
        if record.name == CLUSTER_METADATA_TOPIC_NAME:
            raise MetadataReplayError(offset, record, "the metadata topic is never removed")
        self._removed[topic_id] = DeletedTopic(
            name=record.name,
            topic_id=topic_id,
            creation_offset=record.creation_offset,
            deletion_offset=record.deletion_offset,
        )

    def _replay_partition(self, record: PartitionRecord, offset: int) -> None:
        topic = self._topics.get(record.topic_id) or self._live_topic_for_update(record.topic_id)
        if topic is None:
            raise MetadataReplayError(offset, record, f"no live topic has id {record.topic_id}")
        if topic.partition(record.partition) is not None:
            raise MetadataReplayError(
                offset, record, f"partition {record.partition} of {topic.name!r} exists"
            )
        state = PartitionImage(
            record.partition,
            record.replicas,
            record.isr,
            record.leader,
            record.leader_epoch,
            record.partition_epoch,
        )
        problem = _check_partition_state(state)
        if problem is not None:
            raise MetadataReplayError(offset, record, problem)
        topic.partitions[record.partition] = state

    def _replay_partition_change(self, record: PartitionChangeRecord, offset: int) -> None:
        topic = self._live_topic_for_update(record.topic_id)
        if topic is None:
            raise MetadataReplayError(offset, record, f"no live topic has id {record.topic_id}")
        old = topic.partition(record.partition)
        if old is None:
            raise MetadataReplayError(
                offset, record, f"topic {topic.name!r} has no partition {record.partition}"
            )
        leader = old.leader if record.leader is None else record.leader
        # Kafka's defaults when a change does not say: a new leader starts a new leader epoch,
        # and every change starts a new partition epoch.
        if record.leader_epoch is not None:
            leader_epoch = record.leader_epoch
        else:
            leader_epoch = old.leader_epoch + (1 if leader != old.leader else 0)
        if record.partition_epoch is not None:
            partition_epoch = record.partition_epoch
        else:
            partition_epoch = old.partition_epoch + 1
        if leader_epoch < old.leader_epoch:
            raise MetadataReplayError(
                offset, record, f"leader epoch {leader_epoch} < current {old.leader_epoch}"
            )
        if partition_epoch <= old.partition_epoch:
            raise MetadataReplayError(
                offset,
                record,
                f"partition epoch {partition_epoch} <= current {old.partition_epoch}",
            )
        state = PartitionImage(
            old.partition,
            old.replicas if record.replicas is None else record.replicas,
            old.isr if record.isr is None else record.isr,
            leader,
            leader_epoch,
            partition_epoch,
        )
        problem = _check_partition_state(state)
        if problem is not None:
            raise MetadataReplayError(offset, record, problem)
        topic.partitions[record.partition] = state

    def _replay_config(self, record: ConfigRecord, offset: int) -> None:
        if record.resource_type == ConfigResourceType.TOPIC:
            topic_id = self._topic_id_by_name(record.resource_name)
            topic = None if topic_id is None else self._live_topic_for_update(topic_id)
            if topic is None:
                raise MetadataReplayError(
                    offset, record, f"no live topic is named {record.resource_name!r}"
                )
            topic.configs[record.name] = record.value
        elif record.resource_type == ConfigResourceType.BROKER:
            changes = self._broker_configs.setdefault(record.resource_name, {})
            changes[record.name] = record.value
        else:
            raise MetadataReplayError(
                offset,
                record,
                f"resource type {record.resource_type} is neither TOPIC "
                f"({ConfigResourceType.TOPIC}) nor BROKER ({ConfigResourceType.BROKER})",
            )

    def _acl_exists(self, acl_id: Uuid) -> bool:
        if acl_id in self._acls:
            return self._acls[acl_id] is not None
        return acl_id in self._image.acls

    def _replay_acl(self, record: AccessControlEntryRecord, offset: int) -> None:
        if self._acl_exists(record.id):
            raise MetadataReplayError(offset, record, f"ACL id {record.id} is already in use")
        try:
            binding = binding_from_record(record)
        except ValueError as exc:
            raise MetadataReplayError(offset, record, f"not a storable ACL: {exc}") from None
        self._acls[record.id] = binding

    def _replay_remove_acl(self, record: RemoveAccessControlEntryRecord, offset: int) -> None:
        if not self._acl_exists(record.id):
            raise MetadataReplayError(offset, record, f"no ACL has id {record.id}")
        self._acls[record.id] = None

    def _replay_client_quota(self, record: ClientQuotaRecord, offset: int) -> None:
        problem = client_quota_entity_problem(record.entity)
        if problem is not None:
            raise MetadataReplayError(offset, record, problem)
        entity = entity_key(record.entity)
        changes = self._client_quotas.setdefault(entity, {})
        if record.remove:
            if record.key in changes:
                present = changes[record.key] is not None
            else:
                present = record.key in self._image.client_quotas.get(entity, {})
            if not present:
                raise MetadataReplayError(
                    offset, record, f"entity {entity!r} has no quota {record.key!r} to remove"
                )
            changes[record.key] = None
        else:
            changes[record.key] = record.value

    def _apply_client_quotas(
        self,
    ) -> Mapping[tuple[tuple[str, str | None], ...], Mapping[str, float]]:
        base = self._image.client_quotas
        if not self._client_quotas:
            return base
        puts: dict[tuple[tuple[str, str | None], ...], Mapping[str, float]] = {}
        removes = []
        for entity, changes in self._client_quotas.items():
            old = base.get(entity, empty_map())
            assert isinstance(old, PersistentMap), old
            new = old.updated(
                {k: v for k, v in changes.items() if v is not None},
                [k for k, v in changes.items() if v is None and k in old],
            )
            if new:
                puts[entity] = new
            elif entity in base:
                removes.append(entity)
        return _updated(base, puts, removes)

    def _replay_remove_topic(self, record: RemoveTopicRecord, offset: int) -> None:
        topic_id = record.topic_id
        topic = self._live_topic_for_update(topic_id)
        if topic is None:
            raise MetadataReplayError(offset, record, f"no live topic has id {topic_id}")
        if topic.name == CLUSTER_METADATA_TOPIC_NAME:
            raise MetadataReplayError(offset, record, "the metadata topic is never removed")
        del self._topics[topic_id]
        self._removed[topic_id] = DeletedTopic(
            name=topic.name,
            topic_id=topic_id,
            creation_offset=topic.creation_offset,
            deletion_offset=offset,
        )
        self._names[topic.name] = None

    # ----- brokers ----------------------------------------------------------------------------

    def _replay_register_broker(self, record: RegisterBrokerRecord, offset: int) -> None:
        existing = self._broker(record.broker_id)
        if existing is not None and record.broker_epoch <= existing.broker_epoch:
            raise MetadataReplayError(
                offset,
                record,
                f"broker {record.broker_id} is registered with epoch {existing.broker_epoch}; "
                "a new registration must have a greater epoch",
            )
        if record.broker_epoch > offset:
            raise MetadataReplayError(
                offset, record, "a broker epoch is the offset of a RegisterBrokerRecord"
            )
        self._brokers[record.broker_id] = BrokerImage(
            broker_id=record.broker_id,
            incarnation_id=record.incarnation_id,
            broker_epoch=record.broker_epoch,
            endpoints=record.endpoints,
            rack=record.rack,
            fenced=record.fenced,
        )

    def _registered_broker(
        self,
        record: UnregisterBrokerRecord | FenceBrokerRecord | UnfenceBrokerRecord,
        offset: int,
    ) -> BrokerImage:
        existing = self._broker(record.broker_id)
        if existing is None:
            raise MetadataReplayError(
                offset, record, f"broker {record.broker_id} is not registered"
            )
        if existing.broker_epoch != record.broker_epoch:
            raise MetadataReplayError(
                offset,
                record,
                f"stale broker epoch: broker {record.broker_id} is registered with epoch "
                f"{existing.broker_epoch}",
            )
        return existing

    def _replay_unregister_broker(self, record: UnregisterBrokerRecord, offset: int) -> None:
        self._registered_broker(record, offset)
        self._brokers[record.broker_id] = None

    def _replay_fence_broker(self, record: FenceBrokerRecord, offset: int) -> None:
        existing = self._registered_broker(record, offset)
        self._brokers[record.broker_id] = _with_fenced(existing, fenced=True)

    def _replay_unfence_broker(self, record: UnfenceBrokerRecord, offset: int) -> None:
        existing = self._registered_broker(record, offset)
        self._brokers[record.broker_id] = _with_fenced(existing, fenced=False)

    def _replay_producer_ids(self, record: ProducerIdsRecord, offset: int) -> None:
        """Kafka's ``ProducerIdControlManager.replay``: the next block start only grows."""
        if record.next_producer_id <= self._next_producer_id:
            raise MetadataReplayError(
                offset,
                record,
                f"the next producer id block starts at {self._next_producer_id}; a "
                "ProducerIdsRecord must move it forward",
            )
        self._next_producer_id = record.next_producer_id

    # ----- apply ------------------------------------------------------------------------------

    def apply(self) -> MetadataImage:
        """The image with every record replayed so far; shares all it did not change.

        In snapshot mode, raises ``MetadataReplayError`` if the last record was a
        ``TopicRecord`` still waiting for its ``TopicIdentityRecord``."""
        if self._awaiting_identity is not None:
            record, position = self._awaiting_identity
            raise MetadataReplayError(
                self._offset,
                record,
                f"the snapshot ends after this TopicRecord (position {position}) without its "
                "TopicIdentityRecord",
            )
        image = self._image
        if self._offset == image.offset:
            return image
        topics_by_id = _updated(
            image.topics_by_id,
            {topic_id: change.build() for topic_id, change in self._topics.items()},
            [topic_id for topic_id in self._removed if topic_id in image.topics_by_id],
        )
        name_puts = {name: tid for name, tid in self._names.items() if tid is not None}
        name_removes = [name for name, tid in self._names.items() if tid is None]
        topics_by_name = _updated(image.topics_by_name, name_puts, name_removes)
        brokers = _updated(
            image.brokers,
            {bid: b for bid, b in self._brokers.items() if b is not None},
            [bid for bid, b in self._brokers.items() if b is None],
        )
        deleted_topics = image.deleted_topics
        if self._removed or self._revived:
            assert isinstance(deleted_topics, DeletedTopics), type(deleted_topics)
            deleted_topics = deleted_topics.with_deletions(
                [*self._removed.values(), *self._revived], self._deleted_topics_retained_max
            )
        return MetadataImage(
            offset=self._offset,
            topics_by_id=topics_by_id,
            topics_by_name=topics_by_name,
            brokers=brokers,
            metadata_topic_id=self._metadata_topic_id,
            deleted_topics=deleted_topics,
            broker_configs=self._apply_broker_configs(),
            topic_names_by_collision_key=self._apply_collision_index(topics_by_name),
            acls=_updated(
                image.acls,
                {i: b for i, b in self._acls.items() if b is not None},
                [i for i, b in self._acls.items() if b is None],
            )
            if self._acls
            else image.acls,
            next_producer_id=self._next_producer_id,
            client_quotas=self._apply_client_quotas(),
        )

    def replica_moves(self) -> tuple[dict[int, dict[Uuid, int]], dict[int, dict[Uuid, int]]]:
        """Where replicas came and went in this delta, as (added, dropped): broker id -> topic
        id -> bit mask of partitions (bit p: partition p). Only partitions whose replicas
        changed count (created, reassigned, removed with their topic): what keeps the active
        controller's broker index (``quorum.controller.broker_index``) in step, at the cost
        of the changes, not of the image."""
        added: dict[int, dict[Uuid, int]] = {}
        dropped: dict[int, dict[Uuid, int]] = {}
        for topic_id, change in self._topics.items():
            if change.base is None:  # created here: every replica is new (the common case)
                masks: dict[int, int] = {}
                for partition, state in change.partitions.items():
                    bit = 1 << partition
                    for broker_id in state.replicas:
                        masks[broker_id] = masks.get(broker_id, 0) | bit
                for broker_id, mask in masks.items():
                    topics = added.get(broker_id)
                    if topics is None:
                        topics = added[broker_id] = {}
                    topics[topic_id] = mask
                continue
            base = change.base.partitions
            for partition, state in change.partitions.items():
                old = base.get(partition)
                if old is None:
                    _note(added, state.replicas, topic_id, partition)
                elif old.replicas != state.replicas:
                    _note(added, set(state.replicas) - set(old.replicas), topic_id, partition)
                    _note(dropped, set(old.replicas) - set(state.replicas), topic_id, partition)
        for topic_id in self._removed:
            old_topic = self._image.topics_by_id.get(topic_id)
            if old_topic is not None:
                for partition, state in old_topic.partitions.items():
                    _note(dropped, state.replicas, topic_id, partition)
        return added, dropped

    def _apply_broker_configs(self) -> Mapping[str, Mapping[str, str]]:
        base = self._image.broker_configs
        if not self._broker_configs:
            return base
        puts: dict[str, Mapping[str, str]] = {}
        removes: list[str] = []
        for resource, changes in self._broker_configs.items():
            old = base.get(resource, empty_map())
            assert isinstance(old, PersistentMap), old
            new = old.updated(
                {k: v for k, v in changes.items() if v is not None},
                [k for k, v in changes.items() if v is None],
            )
            if new:
                puts[resource] = new
            else:
                removes.append(resource)
        return _updated(base, puts, removes)

    def _apply_collision_index(
        self, topics_by_name: Mapping[str, Uuid]
    ) -> Mapping[str, frozenset[str]]:
        base = self._image.topic_names_by_collision_key
        touched: dict[str, list[str]] = {}
        for name in self._names:
            if has_collision_chars(name):
                touched.setdefault(topic_collision_key(name), []).append(name)
        if not touched:
            return base
        puts: dict[str, frozenset[str]] = {}
        removes: list[str] = []
        for key, names in touched.items():
            live = set(base.get(key, frozenset()))
            for name in names:
                if name in topics_by_name:
                    live.add(name)
                else:
                    live.discard(name)
            if live:
                puts[key] = frozenset(live)
            else:
                removes.append(key)
        return _updated(base, puts, removes)

    # ----- what one broker must do -------------------------------------------------------------

    def local_changes(self, broker_id: int) -> LocalReplicaChanges:
        """Partitions ``broker_id`` gains and loses between the image and this delta."""
        creates: dict[Uuid, LocalTopicPartitions] = {}
        deletes: dict[Uuid, LocalTopicPartitions] = {}
        for topic_id, change in self._topics.items():
            base = change.base
            gained: set[int] = set()
            lost: set[int] = set()
            for partition, state in change.partitions.items():
                had = base is not None and _hosts(base.partitions.get(partition), broker_id)
                has = broker_id in state.replicas
                if has and not had:
                    gained.add(partition)
                elif had and not has:
                    lost.add(partition)
            if gained:
                creates[topic_id] = LocalTopicPartitions(topic_id, change.name, frozenset(gained))
            if lost:
                deletes[topic_id] = LocalTopicPartitions(topic_id, change.name, frozenset(lost))
        for deleted in [*self._removed.values(), *self._revived]:
            topic_id = deleted.topic_id
            base_topic = self._image.topics_by_id.get(topic_id)
            if base_topic is None:
                continue  # created and removed within this delta: nothing to do anywhere
            lost_all = frozenset(
                p for p, state in base_topic.partitions.items() if broker_id in state.replicas
            )
            if lost_all:
                deletes[topic_id] = LocalTopicPartitions(topic_id, deleted.name, lost_all)
        return LocalReplicaChanges(creates=creates, deletes=deletes)


def _hosts(state: PartitionImage | None, broker_id: int) -> bool:
    return state is not None and broker_id in state.replicas


def _ignore(delta: MetadataDelta, record: object, offset: int) -> None:
    del delta, record, offset


def _only_in_snapshots(delta: MetadataDelta, record: Record, offset: int) -> None:
    del delta
    raise MetadataReplayError(
        offset,
        record,
        "this record belongs only in snapshots (.checkpoint files), never in the metadata log",
    )


# Replay's handlers by record type (docs/conventions.md#images-and-deltas): in log replay, and
# in a snapshot (where only the records of a state are accepted).
_LOG_HANDLERS: Final[Mapping[type, _Handler]] = {
    TopicRecord: MetadataDelta._replay_topic,
    PartitionRecord: MetadataDelta._replay_partition,
    PartitionChangeRecord: MetadataDelta._replay_partition_change,
    ConfigRecord: MetadataDelta._replay_config,
    RemoveTopicRecord: MetadataDelta._replay_remove_topic,
    RegisterBrokerRecord: MetadataDelta._replay_register_broker,
    UnregisterBrokerRecord: MetadataDelta._replay_unregister_broker,
    FenceBrokerRecord: MetadataDelta._replay_fence_broker,
    UnfenceBrokerRecord: MetadataDelta._replay_unfence_broker,
    NoOpRecord: _ignore,
    AccessControlEntryRecord: MetadataDelta._replay_acl,
    RemoveAccessControlEntryRecord: MetadataDelta._replay_remove_acl,
    ProducerIdsRecord: MetadataDelta._replay_producer_ids,
    ClientQuotaRecord: MetadataDelta._replay_client_quota,
    LeaderChangeMessage: _ignore,
    SnapshotHeader: _ignore,
    SnapshotFooter: _ignore,
    KRaftVersionRecord: _ignore,
    VotersRecord: _ignore,
    TopicIdentityRecord: _only_in_snapshots,
    DeletedTopicRecord: _only_in_snapshots,
}
_SNAPSHOT_HANDLERS: Final[Mapping[type, _Handler]] = {
    TopicRecord: MetadataDelta._replay_topic,
    TopicIdentityRecord: MetadataDelta._replay_topic_identity,
    DeletedTopicRecord: MetadataDelta._replay_deleted_topic,
    PartitionRecord: MetadataDelta._replay_partition,
    ConfigRecord: MetadataDelta._replay_config,
    RegisterBrokerRecord: MetadataDelta._replay_register_broker,
    AccessControlEntryRecord: MetadataDelta._replay_acl,
    ProducerIdsRecord: MetadataDelta._replay_producer_ids,
    ClientQuotaRecord: MetadataDelta._replay_client_quota,
    SnapshotHeader: _ignore,
    SnapshotFooter: _ignore,
    # The voter set in force at the snapshot's end (KIP-853): read by the Raft layer.
    KRaftVersionRecord: _ignore,
    VotersRecord: _ignore,
}


def _with_fenced(broker: BrokerImage, *, fenced: bool) -> BrokerImage:
    return BrokerImage(
        broker_id=broker.broker_id,
        incarnation_id=broker.incarnation_id,
        broker_epoch=broker.broker_epoch,
        endpoints=broker.endpoints,
        rack=broker.rack,
        fenced=fenced,
    )


def _note(
    into: dict[int, dict[Uuid, int]], brokers: Iterable[int], topic_id: Uuid, partition: int
) -> None:
    bit = 1 << partition
    for broker_id in brokers:
        topics = into.get(broker_id)
        if topics is None:
            topics = into[broker_id] = {}
        topics[topic_id] = topics.get(topic_id, 0) | bit


def _updated(
    base: Mapping[KT, VT], puts: Mapping[KT, VT], removes: Iterable[KT]
) -> Mapping[KT, VT]:
    assert isinstance(base, PersistentMap), f"image maps are PersistentMaps, got {type(base)}"
    return base.updated(puts, removes)


# ----- helpers ------------------------------------------------------------------------------


def replay_records(image: MetadataImage, records: Iterable[tuple[int, Record]]) -> MetadataImage:
    """``image`` with ``(offset, record)`` pairs replayed, through one delta."""
    delta = MetadataDelta(image)
    for offset, record in records:
        delta.replay(record, offset)
    return delta.apply()


def replay_batches(image: MetadataImage, batches: Iterable[DecodedBatch]) -> MetadataImage:
    """``image`` with every batch replayed in order, through one delta (one ``apply``)."""
    delta = MetadataDelta(image)
    for batch in batches:
        delta.replay_batch(batch)
    return delta.apply()
