"""The values of the AdminClient's API (Kafka's admin types with Python names): the topics a
call names (``TopicCollection``), what it creates or grows (``NewTopic``, ``NewPartitions``),
what it reads (``TopicDescription``, ``ClusterDescription``, ...) and one topic's outcome
(``TopicOutcome``: Kafka's ``KafkaFuture``, already completed)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar, cast

from quorum.controller.alter_configs import AlterConfigOp as AlterConfigOpType
from quorum.errors import AdminError
from quorum.ids import Uuid

__all__ = [
    "AlterConfigOp",
    "AlterConfigOpType",
    "BrokerNode",
    "ClusterDescription",
    "ControllerNode",
    "DeletedTopic",
    "NewPartitions",
    "NewTopic",
    "PartitionsCreated",
    "TopicCollection",
    "TopicDescription",
    "TopicIdCollection",
    "TopicListing",
    "TopicMetadataAndConfig",
    "TopicNameCollection",
    "TopicOutcome",
    "TopicPartition",
    "TopicPartitionInfo",
]

T = TypeVar("T")


# ----- topic collections -------------------------------------------------------------------------


class TopicCollection:
    """Topics named by id or by name (KIP-516's ``TopicCollection``). Repeats are dropped,
    the first occurrence keeps its place."""

    @staticmethod
    def of_topic_ids(topic_ids: Iterable[Uuid | str]) -> TopicIdCollection:
        """Ids as ``Uuid`` or text (Kafka's base64 form, or dashed hex)."""
        if isinstance(topic_ids, str):
            raise TypeError("of_topic_ids takes a collection of ids, not one id string")
        ids = (i if isinstance(i, Uuid) else Uuid.parse(i) for i in topic_ids)
        return TopicIdCollection(tuple(dict.fromkeys(ids)))

    @staticmethod
    def of_topic_names(topic_names: Iterable[str]) -> TopicNameCollection:
        if isinstance(topic_names, str):
            raise TypeError("of_topic_names takes a collection of names, not one name")
        names = list(topic_names)
        for name in names:
            if not isinstance(name, str):
                raise TypeError(f"a topic name is a str, got {name!r}")
        return TopicNameCollection(tuple(dict.fromkeys(names)))


@dataclass(frozen=True, slots=True)
class TopicIdCollection(TopicCollection):
    topic_ids: tuple[Uuid, ...]


@dataclass(frozen=True, slots=True)
class TopicNameCollection(TopicCollection):
    topic_names: tuple[str, ...]


# ----- values ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicOutcome(Generic[T]):
    """One topic's outcome: Kafka's ``KafkaFuture``, already completed."""

    value: T | None
    error: AdminError | None = None

    def __post_init__(self) -> None:
        assert (self.value is None) != (self.error is None), "exactly one of value and error"

    def result(self) -> T:
        """The value, or raises the topic's error (``KafkaFuture.get()``)."""
        if self.error is not None:
            raise self.error
        return cast(T, self.value)

    def exception(self) -> AdminError | None:
        return self.error

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create (Kafka's ``NewTopic``). ``None`` partitions or replication factor use
    the cluster's default; with ``replica_assignments`` ({partition: [broker, ...]}) leave both
    ``None``."""

    name: str
    num_partitions: int | None = None
    replication_factor: int | None = None
    configs: Mapping[str, str] = field(default_factory=dict)
    replica_assignments: Mapping[int, Sequence[int]] | None = None


@dataclass(frozen=True, slots=True)
class AlterConfigOp:
    """One change of ``incremental_alter_configs`` (Kafka's ``AlterConfigOp``): ``op`` SET
    (to ``value``), DELETE (``value`` ignored), APPEND or SUBTRACT (comma-separated items of a
    list config)."""

    name: str
    value: str | None
    op: AlterConfigOpType = AlterConfigOpType.SET


@dataclass(frozen=True, slots=True)
class NewPartitions:
    """How to grow one topic (Kafka's ``NewPartitions``): to ``total_count`` partitions, the new
    ones placed by the controller, or on ``new_assignments`` (one broker list per new
    partition, the preferred leader first). Build it with ``increase_to``."""

    total_count: int
    new_assignments: tuple[tuple[int, ...], ...] | None = None

    @staticmethod
    def increase_to(
        total_count: int, new_assignments: Sequence[Sequence[int]] | None = None
    ) -> NewPartitions:
        if isinstance(total_count, bool) or not isinstance(total_count, int):
            raise TypeError(f"total_count is an int, got {total_count!r}")
        assignments = None if new_assignments is None else tuple(tuple(a) for a in new_assignments)
        return NewPartitions(total_count, assignments)


@dataclass(frozen=True, slots=True)
class PartitionsCreated:
    """A topic that grew (or, with ``validate_only``, would grow) to ``total_count``
    partitions; Kafka's future completes with nothing, this one with the topic's identity."""

    name: str
    topic_id: Uuid
    total_count: int


@dataclass(frozen=True, slots=True)
class TopicMetadataAndConfig:
    """A created topic (Kafka's ``CreateTopicsResult.TopicMetadataAndConfig``). With
    ``validate_only``: ``topic_id`` is ZERO_UUID and ``creation_offset`` -1."""

    name: str
    topic_id: Uuid
    creation_offset: int
    num_partitions: int
    replication_factor: int
    configs: Mapping[str, str]


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    """One partition by topic name (Kafka's ``TopicPartition``); prints as Kafka's tools print
    it, ``orders-0``."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class TopicPartitionInfo:
    """One partition (Kafka's ``TopicPartitionInfo``, with broker ids instead of ``Node``s).
    ``leader`` is None when the partition has no leader."""

    partition: int
    leader: int | None
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader_epoch: int = 0
    offline_replicas: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicDescription:
    """A described topic (Kafka's ``TopicDescription``). The pair (``topic_id``,
    ``creation_offset``) is the topic's identity."""

    name: str
    topic_id: Uuid
    is_internal: bool
    creation_offset: int
    partitions: tuple[TopicPartitionInfo, ...]
    configs: Mapping[str, str]

    @property
    def replication_factor(self) -> int:
        """As kafka-topics computes it: the first partition's replica count (0 if none)."""
        return len(self.partitions[0].replicas) if self.partitions else 0


@dataclass(frozen=True, slots=True)
class DeletedTopic:
    """A deleted topic: both its name and its id, whichever it was named by (KIP-516)."""

    name: str
    topic_id: Uuid


@dataclass(frozen=True, slots=True)
class TopicListing:
    """One topic of ``list_topics`` (Kafka's ``TopicListing``, plus the creation offset)."""

    name: str
    topic_id: Uuid
    is_internal: bool
    creation_offset: int


@dataclass(frozen=True, slots=True)
class BrokerNode:
    broker_id: int
    host: str
    port: int
    rack: str | None
    is_fenced: bool
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class ControllerNode:
    node_id: int
    host: str
    port: int

    @property
    def endpoint(self) -> str:
        return _join_host_port(self.host, self.port)


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    """``describe_cluster()``: Kafka's ``DescribeClusterResult``, completed."""

    cluster_id: str
    controller_id: int | None
    brokers: tuple[BrokerNode, ...]
    controllers: tuple[ControllerNode, ...]
    metadata_topic_id: Uuid | None
    metadata_offset: int

    @property
    def nodes(self) -> tuple[BrokerNode, ...]:
        """Kafka's ``nodes()``: the brokers."""
        return self.brokers


def _join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"
