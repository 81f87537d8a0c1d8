"""Requests and responses of the controller state machine (frozen dataclasses, no wire types).

The gRPC layer turns protobuf messages into these and back; the state machine never sees a
protobuf. Shapes follow Kafka's CreateTopics / DeleteTopics (v6, KIP-516) / Metadata /
BrokerRegistration / BrokerHeartbeat messages. Every error result carries a Kafka error code and
a message that says what was wrong and what is allowed.

Request fields are whatever the caller sent, unvalidated: "-1" means "the default" where Kafka
says so, and bad values (empty names, duplicate entries, out-of-range numbers) are represented
faithfully so the state machine can answer them with the right code.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from quorum.errors import ErrorCode
from quorum.ids import ZERO_UUID, Uuid
from quorum.metadata.records import BrokerEndpoint

__all__ = [
    "AllocateProducerIdsRequest",
    "AllocateProducerIdsResponse",
    "AlterPartitionItem",
    "AlterPartitionRequest",
    "AlterPartitionResponse",
    "AlterPartitionResult",
    "AlterPartitionTopic",
    "AlterPartitionTopicResult",
    "BrokerHeartbeatRequest",
    "BrokerHeartbeatResponse",
    "CreatableReplicaAssignment",
    "CreatableTopic",
    "CreatePartitionsRequest",
    "CreatePartitionsResponse",
    "CreatePartitionsResult",
    "CreatePartitionsTopic",
    "CreateTopicResult",
    "CreateTopicsRequest",
    "CreateTopicsResponse",
    "DeleteTopic",
    "DeleteTopicResult",
    "DeleteTopicsRequest",
    "DeleteTopicsResponse",
    "DescribeTopic",
    "ElectLeadersRequest",
    "ElectLeadersResponse",
    "ElectionResult",
    "ElectionType",
    "PartitionDescription",
    "RegisterBrokerRequest",
    "RegisterBrokerResponse",
    "TopicDescription",
    "TopicListing",
]

# ----- CreateTopics -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CreatableReplicaAssignment:
    """Kafka's ``CreatableReplicaAssignment``: the replicas of one partition, leader first."""

    partition_index: int
    broker_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class CreatableTopic:
    """One topic of a CreateTopics request.

    ``num_partitions`` / ``replication_factor`` of -1 mean the controller's defaults (Kafka's
    ``num.partitions`` = 1, ``default.replication.factor`` = 1); both must be -1 when
    ``assignments`` are given. ``configs`` are ``(name, value)`` pairs in request order (a
    list, not a dict, so duplicates can be refused rather than silently merged).
    """

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: tuple[CreatableReplicaAssignment, ...] = ()
    configs: tuple[tuple[str, str | None], ...] = ()


@dataclass(frozen=True, slots=True)
class CreateTopicsRequest:
    topics: tuple[CreatableTopic, ...]
    validate_only: bool = False


@dataclass(frozen=True, slots=True)
class CreateTopicResult:
    """The outcome for one requested topic (one per request entry, in request order).

    On success: ``topic_id`` and ``creation_offset`` (the offset of its ``TopicRecord``) are
    the topic's identity; with ``validate_only`` they are ``ZERO_UUID`` / -1 (no id is drawn).
    ``configs`` are the configs the topic was created with, sorted by name. On error:
    ``ZERO_UUID``, -1, -1, -1 and no configs.
    """

    name: str
    topic_id: Uuid = ZERO_UUID
    creation_offset: int = -1
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    num_partitions: int = -1
    replication_factor: int = -1
    configs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class CreateTopicsResponse:
    topics: tuple[CreateTopicResult, ...]

    def result(self, name: str) -> CreateTopicResult:
        """The first result for ``name`` (KeyError if the request did not name it)."""
        for result in self.topics:
            if result.name == name:
                return result
        raise KeyError(name)


# ----- CreatePartitions ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CreatePartitionsTopic:
    """One topic of Kafka's CreatePartitions request: grow it to ``count`` partitions.

    The topic is named by ``name``, or by ``topic_id`` (not in Kafka, whose request is by name
    only) when it is not ``ZERO_UUID``. ``assignments`` is None to let the controller place
    the new partitions, else one replica list (the preferred leader first) per new partition,
    in partition order (Kafka's ``CreatePartitionsAssignment``).
    """

    name: str | None = None
    count: int = -1
    assignments: tuple[tuple[int, ...], ...] | None = None
    topic_id: Uuid = ZERO_UUID


@dataclass(frozen=True, slots=True)
class CreatePartitionsRequest:
    topics: tuple[CreatePartitionsTopic, ...]
    validate_only: bool = False


@dataclass(frozen=True, slots=True)
class CreatePartitionsResult:
    """The outcome for one request entry (in request order): the topic's name and id when it
    was found, and the Kafka error code (NONE when it has, or with ``validate_only`` would
    have, ``count`` partitions)."""

    name: str | None
    topic_id: Uuid = ZERO_UUID
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class CreatePartitionsResponse:
    results: tuple[CreatePartitionsResult, ...]


# ----- DeleteTopics -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeleteTopic:
    """One entry of DeleteTopics v6 (KIP-516): by id, or by name when ``topic_id`` is zero.

    ``expected_topic_id`` (by name only) is a precondition: delete ``name`` only if its
    current id is this one, so a topic recreated under the same name is not deleted by mistake
    (docs/architecture.md#the-controller). Not part of Kafka.
    """

    name: str | None = None
    topic_id: Uuid = ZERO_UUID
    expected_topic_id: Uuid | None = None


@dataclass(frozen=True, slots=True)
class DeleteTopicsRequest:
    topics: tuple[DeleteTopic, ...]


@dataclass(frozen=True, slots=True)
class DeleteTopicResult:
    """Carries both the name and the id when the topic was found (KIP-516 DeleteTopics v6)."""

    name: str | None
    topic_id: Uuid
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class DeleteTopicsResponse:
    topics: tuple[DeleteTopicResult, ...]


# ----- DescribeTopics / ListTopics ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DescribeTopic:
    """A topic to describe: by id, or by name when ``topic_id`` is zero (id first, KIP-516)."""

    name: str | None = None
    topic_id: Uuid = ZERO_UUID


@dataclass(frozen=True, slots=True)
class PartitionDescription:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]
    """Replicas on brokers that are fenced or not registered."""


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str | None
    topic_id: Uuid
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    is_internal: bool = False
    creation_offset: int = -1
    partitions: tuple[PartitionDescription, ...] = ()
    configs: tuple[tuple[str, str], ...] = ()

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else -1


@dataclass(frozen=True, slots=True)
class TopicListing:
    name: str
    topic_id: Uuid
    is_internal: bool
    creation_offset: int


# ----- brokers ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RegisterBrokerRequest:
    broker_id: int
    incarnation_id: Uuid
    endpoints: tuple[BrokerEndpoint, ...] = ()
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class RegisterBrokerResponse:
    """``broker_epoch`` is the offset of the broker's ``RegisterBrokerRecord`` (-1 on error)."""

    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    broker_epoch: int = -1


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatRequest:
    broker_id: int
    broker_epoch: int
    current_metadata_offset: int
    """The offset of the last metadata record the broker has applied (-1: none yet)."""
    want_shut_down: bool = False
    """The broker is stopping (Kafka's controlled shutdown): take it out of ISRs and
    leadership now and end its session, so its next incarnation registers at once."""


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatResponse:
    """``is_fenced`` is the state once this response's records (if any) are committed."""

    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    is_caught_up: bool = False
    is_fenced: bool = True
    should_shut_down: bool = False


# ----- producer ids -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AllocateProducerIdsRequest:
    """Kafka's AllocateProducerIds (KIP-730): a registered broker asks for a block of ids."""

    broker_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class AllocateProducerIdsResponse:
    """The block ``[producer_id_start, producer_id_start + producer_id_len)`` (-1 and 0 on
    error)."""

    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    producer_id_start: int = -1
    producer_id_len: int = 0


# ----- AlterPartition (quorum/controller/alter_partition.py) ---------------------------------


@dataclass(frozen=True, slots=True)
class AlterPartitionItem:
    """One partition of Kafka's AlterPartition: the leader's view it was decided on
    (``leader_epoch``, ``partition_epoch``) and the ISR it asks for."""

    partition_index: int
    leader_epoch: int
    new_isr: tuple[int, ...]
    partition_epoch: int


@dataclass(frozen=True, slots=True)
class AlterPartitionTopic:
    topic_id: Uuid
    partitions: tuple[AlterPartitionItem, ...]


@dataclass(frozen=True, slots=True)
class AlterPartitionRequest:
    """Kafka's AlterPartition (KIP-497, by topic id since KIP-841): a partition leader, as
    itself and at its broker epoch, changes the ISR of partitions it leads."""

    broker_id: int
    broker_epoch: int
    topics: tuple[AlterPartitionTopic, ...]


@dataclass(frozen=True, slots=True)
class AlterPartitionResult:
    """The partition's state after the change, or its current state on refusal (-1 and ``()``
    for a partition that does not exist)."""

    partition_index: int
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    leader_id: int = -1
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    partition_epoch: int = -1


@dataclass(frozen=True, slots=True)
class AlterPartitionTopicResult:
    topic_id: Uuid
    partitions: tuple[AlterPartitionResult, ...]


@dataclass(frozen=True, slots=True)
class AlterPartitionResponse:
    """A request-level error (STALE_BROKER_EPOCH, INVALID_REQUEST) leaves ``topics`` empty."""

    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    topics: tuple[AlterPartitionTopicResult, ...] = ()


# ----- ElectLeaders (quorum/controller/elections.py) -----------------------------------------


class ElectionType(enum.IntEnum):
    """Kafka's ``ElectionType`` codes."""

    PREFERRED = 0
    UNCLEAN = 1


@dataclass(frozen=True, slots=True)
class ElectLeadersRequest:
    """Kafka's ElectLeaders: ``partitions`` None means every partition of every topic."""

    election_type: ElectionType
    partitions: tuple[tuple[str, int], ...] | None


@dataclass(frozen=True, slots=True)
class ElectionResult:
    """One partition's outcome; ``leader`` is its leader once the election is committed (-1
    where the partition does not exist)."""

    topic: str
    partition: int
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    leader: int = -1


@dataclass(frozen=True, slots=True)
class ElectLeadersResponse:
    """Per partition in request order (for "all partitions": topic name then partition
    order, leaving out the partitions that needed no election). A request-level error
    (INVALID_REQUEST) leaves ``results`` empty."""

    results: tuple[ElectionResult, ...] = ()
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
