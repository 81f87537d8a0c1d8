"""Topic and partition records: a topic created and removed, its partitions and their changes
(KIP-631 types 2, 3, 5, 9), and the two records only snapshots carry to restore topic identity
(metaquorum's types 200 and 201), each with its wire form.

``quorum.metadata.records`` documents the wire form and gathers these with the other families;
``record_codec`` dispatches to the ``*_to_wire`` / ``*_from_wire`` functions here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from quorum.ids import Uuid
from quorum.limits import INT32_MAX
from quorum.metadata.record_fields import (
    INT64_MAX,
    check_bool,
    check_int,
    check_int_tuple,
    check_optional_int,
    check_optional_int_tuple,
    check_str,
    check_uuid,
    fail_field,
    optional_tuple_from_wire,
    tuple_from_wire,
    uuid_from_wire,
)

__all__ = [
    "NO_LEADER",
    "DeletedTopicRecord",
    "PartitionChangeRecord",
    "PartitionRecord",
    "RemoveTopicRecord",
    "TopicIdentityRecord",
    "TopicRecord",
    "deleted_topic_from_wire",
    "deleted_topic_to_wire",
    "partition_change_from_wire",
    "partition_change_to_wire",
    "partition_from_wire",
    "partition_to_wire",
    "remove_topic_from_wire",
    "remove_topic_to_wire",
    "topic_from_wire",
    "topic_identity_from_wire",
    "topic_identity_to_wire",
    "topic_to_wire",
]

NO_LEADER: Final = -1
"""``PartitionRecord.leader`` / ``PartitionChangeRecord.leader`` when no replica leads."""


@dataclass(frozen=True, slots=True)
class TopicRecord:
    name: str
    topic_id: Uuid
    internal: bool = False

    TYPE: ClassVar[int] = 2
    VERSION: ClassVar[int] = 0

    def __post_init__(self) -> None:
        check_str(self, "name", self.name)
        check_uuid(self, "topic_id", self.topic_id)
        check_bool(self, "internal", self.internal)


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    topic_id: Uuid
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0

    TYPE: ClassVar[int] = 3
    VERSION: ClassVar[int] = 0

    def __post_init__(self) -> None:
        check_uuid(self, "topic_id", self.topic_id)
        check_int(self, "partition", self.partition, 0, INT32_MAX)
        check_int_tuple(self, "replicas", self.replicas, 0, INT32_MAX)
        check_int_tuple(self, "isr", self.isr, 0, INT32_MAX)
        check_int(self, "leader", self.leader, NO_LEADER, INT32_MAX)
        check_int(self, "leader_epoch", self.leader_epoch, 0, INT32_MAX)
        check_int(self, "partition_epoch", self.partition_epoch, 0, INT32_MAX)


@dataclass(frozen=True, slots=True)
class PartitionChangeRecord:
    """A change to one partition; every ``None`` field means "unchanged"."""

    topic_id: Uuid
    partition: int
    isr: tuple[int, ...] | None = None
    leader: int | None = None
    replicas: tuple[int, ...] | None = None
    leader_epoch: int | None = None
    partition_epoch: int | None = None

    TYPE: ClassVar[int] = 5
    VERSION: ClassVar[int] = 0

    def __post_init__(self) -> None:
        check_uuid(self, "topic_id", self.topic_id)
        check_int(self, "partition", self.partition, 0, INT32_MAX)
        check_optional_int_tuple(self, "isr", self.isr, 0, INT32_MAX)
        check_optional_int(self, "leader", self.leader, NO_LEADER, INT32_MAX)
        check_optional_int_tuple(self, "replicas", self.replicas, 0, INT32_MAX)
        check_optional_int(self, "leader_epoch", self.leader_epoch, 0, INT32_MAX)
        check_optional_int(self, "partition_epoch", self.partition_epoch, 0, INT32_MAX)


@dataclass(frozen=True, slots=True)
class RemoveTopicRecord:
    topic_id: Uuid

    TYPE: ClassVar[int] = 9
    VERSION: ClassVar[int] = 0

    def __post_init__(self) -> None:
        check_uuid(self, "topic_id", self.topic_id)


@dataclass(frozen=True, slots=True)
class TopicIdentityRecord:
    """Snapshot only: the creation offset of a live topic (metaquorum; Kafka has none).

    In a snapshot it immediately follows the ``TopicRecord`` of ``topic_id``: the pair restores
    the topic's identity (``topic_id``, ``creation_offset``), where replaying the ``TopicRecord``
    alone could only give the snapshot's own offset.
    """

    topic_id: Uuid
    creation_offset: int

    TYPE: ClassVar[int] = 200
    VERSION: ClassVar[int] = 0

    def __post_init__(self) -> None:
        check_uuid(self, "topic_id", self.topic_id)
        check_int(self, "creation_offset", self.creation_offset, 0, INT64_MAX)


@dataclass(frozen=True, slots=True)
class DeletedTopicRecord:
    """Snapshot only: a removed topic (metaquorum; Kafka has none).

    Ids are never reused (docs/architecture.md#the-controller), so an image remembers every removed
    topic; a snapshot carries one of these per removed topic, with the offsets of its
    ``TopicRecord`` and of its ``RemoveTopicRecord``.
    """

    name: str
    topic_id: Uuid
    creation_offset: int
    deletion_offset: int

    TYPE: ClassVar[int] = 201
    VERSION: ClassVar[int] = 0

    def __post_init__(self) -> None:
        check_str(self, "name", self.name)
        check_uuid(self, "topic_id", self.topic_id)
        check_int(self, "creation_offset", self.creation_offset, 0, INT64_MAX)
        check_int(self, "deletion_offset", self.deletion_offset, 0, INT64_MAX)
        if self.deletion_offset <= self.creation_offset:
            fail_field(
                self,
                "deletion_offset",
                f"greater than creation_offset {self.creation_offset}",
                self.deletion_offset,
            )


# ----- wire form --------------------------------------------------------------------------


def topic_to_wire(r: TopicRecord) -> list[object]:
    return [r.name, r.topic_id.bytes, r.internal]


def partition_to_wire(r: PartitionRecord) -> list[object]:
    return [
        r.topic_id.bytes,
        r.partition,
        list(r.replicas),
        list(r.isr),
        r.leader,
        r.leader_epoch,
        r.partition_epoch,
    ]


def partition_change_to_wire(r: PartitionChangeRecord) -> list[object]:
    return [
        r.topic_id.bytes,
        r.partition,
        None if r.isr is None else list(r.isr),
        r.leader,
        None if r.replicas is None else list(r.replicas),
        r.leader_epoch,
        r.partition_epoch,
    ]


def remove_topic_to_wire(r: RemoveTopicRecord) -> list[object]:
    return [r.topic_id.bytes]


def topic_identity_to_wire(r: TopicIdentityRecord) -> list[object]:
    return [r.topic_id.bytes, r.creation_offset]


def deleted_topic_to_wire(r: DeletedTopicRecord) -> list[object]:
    return [r.name, r.topic_id.bytes, r.creation_offset, r.deletion_offset]


def topic_from_wire(f: Sequence[Any]) -> TopicRecord:
    return TopicRecord(f[0], uuid_from_wire(f[1]), f[2])


def partition_from_wire(f: Sequence[Any]) -> PartitionRecord:
    return PartitionRecord(
        uuid_from_wire(f[0]),
        f[1],
        tuple_from_wire(f[2]),
        tuple_from_wire(f[3]),
        f[4],
        f[5],
        f[6],
    )


def partition_change_from_wire(f: Sequence[Any]) -> PartitionChangeRecord:
    return PartitionChangeRecord(
        uuid_from_wire(f[0]),
        f[1],
        optional_tuple_from_wire(f[2]),
        f[3],
        optional_tuple_from_wire(f[4]),
        f[5],
        f[6],
    )


def remove_topic_from_wire(f: Sequence[Any]) -> RemoveTopicRecord:
    return RemoveTopicRecord(uuid_from_wire(f[0]))


def topic_identity_from_wire(f: Sequence[Any]) -> TopicIdentityRecord:
    return TopicIdentityRecord(uuid_from_wire(f[0]), f[1])


def deleted_topic_from_wire(f: Sequence[Any]) -> DeletedTopicRecord:
    return DeletedTopicRecord(f[0], uuid_from_wire(f[1]), f[2], f[3])
