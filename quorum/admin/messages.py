"""The AdminClient's values as ``AdminService`` messages (admin.proto) and its answers as
outcomes: requests built from ``NewTopic``, ``NewPartitions``, ...; per-topic results read into
``TopicOutcome``s, every requested key matched to exactly one. An answer this client cannot
read (a malformed id, a result for a topic not asked about) is ``UnknownServerError``."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Final, TypeVar

from quorum.admin.types import (
    DeletedTopic,
    NewPartitions,
    NewTopic,
    PartitionsCreated,
    TopicDescription,
    TopicMetadataAndConfig,
    TopicOutcome,
    TopicPartitionInfo,
)
from quorum.errors import AdminError, ErrorCode, InvalidTopicError, UnknownServerError, error_for
from quorum.ids import UUID_BYTES, ZERO_UUID, Uuid
from quorum.limits import ACL_REQUEST_ENTRIES_MAX
from quorum.rpc.v1 import admin_pb2

__all__ = [
    "ACL_ENTRIES_PER_REQUEST_MAX",
    "NO_ID",
    "NO_OFFSET",
    "at_most_one_request",
    "chunks",
    "configs_from_answer",
    "creatable_topic",
    "creation_outcome",
    "deletion_outcome",
    "description_outcome",
    "key_outcomes",
    "optional_id",
    "partitions_outcome",
    "partitions_topic",
    "topic_error",
    "uuid_from_answer",
    "with_empty_name_errors",
    "with_zero_id_errors",
]

NO_ID: Final = -1
NO_OFFSET: Final = -1

# What one CreateAcls / DeleteAcls request may carry (the server's bound).
ACL_ENTRIES_PER_REQUEST_MAX: Final = ACL_REQUEST_ENTRIES_MAX

T = TypeVar("T")
K = TypeVar("K", str, Uuid)


def at_most_one_request(entries: Iterable[T], what: str) -> list[T]:
    """``entries`` as a list, or ``ValueError`` past what one ACL request may carry."""
    wanted = list(entries)
    if len(wanted) > ACL_ENTRIES_PER_REQUEST_MAX:
        raise ValueError(f"{len(wanted)} {what} in one call; at most {ACL_ENTRIES_PER_REQUEST_MAX}")
    return wanted


def uuid_from_answer(what: str, data: bytes) -> Uuid:
    if not data:
        return ZERO_UUID
    if len(data) != UUID_BYTES:
        raise UnknownServerError(f"malformed answer: {what} is {len(data)} bytes, not 16")
    return Uuid.from_bytes(data)


def optional_id(value: int) -> int | None:
    return None if value < 0 else value


def configs_from_answer(entries: Iterable[admin_pb2.TopicConfig]) -> Mapping[str, str]:
    return MappingProxyType({entry.name: entry.value for entry in entries})


def chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def topic_error(code: int, message: str) -> AdminError | None:
    return None if code == ErrorCode.NONE else error_for(code, message)


def key_outcomes(
    kind: str,
    requested: Sequence[K],
    answered: Iterable[tuple[K, TopicOutcome[T]]],
) -> dict[K, TopicOutcome[T]]:
    """Match per-topic results to the requested keys: every key gets exactly one outcome."""
    by_key: dict[K, TopicOutcome[T]] = {}
    wanted = set(requested)
    for key, outcome in answered:
        if key not in wanted:
            raise UnknownServerError(f"malformed answer: a result for {kind} {key} not asked for")
        if key in by_key:
            raise UnknownServerError(f"malformed answer: two results for {kind} {key}")
        by_key[key] = outcome
    return {
        key: by_key.get(
            key,
            TopicOutcome(None, UnknownServerError(f"the server did not answer for {kind} {key}")),
        )
        for key in requested
    }


# ----- per-topic mapping -------------------------------------------------------------------------


def creatable_topic(topic: NewTopic) -> admin_pb2.CreatableTopic:
    if not isinstance(topic, NewTopic):
        raise TypeError(f"create_topics takes NewTopic values, got {topic!r}")
    assignments = [
        admin_pb2.CreatableReplicaAssignment(partition_index=p, broker_ids=list(brokers))
        for p, brokers in sorted((topic.replica_assignments or {}).items())
    ]
    return admin_pb2.CreatableTopic(
        name=topic.name,
        num_partitions=NO_ID if topic.num_partitions is None else topic.num_partitions,
        replication_factor=NO_ID if topic.replication_factor is None else topic.replication_factor,
        assignments=assignments,
        configs=[admin_pb2.TopicConfig(name=k, value=v) for k, v in topic.configs.items()],
    )


def creation_outcome(
    result: admin_pb2.CreatableTopicResult, validate_only: bool
) -> TopicOutcome[TopicMetadataAndConfig]:
    error = topic_error(result.error_code, result.error_message)
    if error is not None:
        return TopicOutcome(None, error)
    topic_id = uuid_from_answer("topic_id", result.topic_id)
    if topic_id == ZERO_UUID and not validate_only:
        error = UnknownServerError(f"malformed answer: topic {result.name!r} created without id")
        return TopicOutcome(None, error)
    return TopicOutcome(
        TopicMetadataAndConfig(
            name=result.name,
            topic_id=topic_id,
            creation_offset=result.creation_offset,
            num_partitions=result.num_partitions,
            replication_factor=result.replication_factor,
            configs=configs_from_answer(result.configs),
        )
    )


def partitions_topic(key: str | Uuid, growth: NewPartitions) -> admin_pb2.CreatePartitionsTopic:
    assignments = [
        admin_pb2.CreatePartitionsAssignment(broker_ids=list(brokers))
        for brokers in growth.new_assignments or ()
    ]
    if isinstance(key, Uuid):
        return admin_pb2.CreatePartitionsTopic(
            topic_id=key.bytes, count=growth.total_count, assignments=assignments
        )
    return admin_pb2.CreatePartitionsTopic(
        name=key, count=growth.total_count, assignments=assignments
    )


def partitions_outcome(
    key: str | Uuid, growth: NewPartitions, result: admin_pb2.CreatePartitionsTopicResult
) -> TopicOutcome[PartitionsCreated]:
    topic_id = uuid_from_answer("topic_id", result.topic_id)
    if (isinstance(key, Uuid) and result.topic_id and topic_id != key) or (
        isinstance(key, str) and result.name != key
    ):
        raise UnknownServerError(
            f"malformed answer: a CreatePartitions result for {result.name!r} / {topic_id} "
            f"where {key} was asked for"
        )
    error = topic_error(result.error_code, result.error_message)
    if error is not None:
        return TopicOutcome(None, error)
    return TopicOutcome(PartitionsCreated(result.name, topic_id, growth.total_count))


def deletion_outcome(result: admin_pb2.DeletableTopicResult) -> TopicOutcome[DeletedTopic]:
    error = topic_error(result.error_code, result.error_message)
    if error is not None:
        return TopicOutcome(None, error)
    return TopicOutcome(DeletedTopic(result.name, uuid_from_answer("topic_id", result.topic_id)))


def description_outcome(
    result: admin_pb2.DescribeTopicResult,
) -> TopicOutcome[TopicDescription]:
    error = topic_error(result.error_code, result.error_message)
    if error is not None:
        return TopicOutcome(None, error)
    partitions = sorted(
        (
            TopicPartitionInfo(
                partition=p.partition_index,
                leader=optional_id(p.leader_id),
                replicas=tuple(p.replica_nodes),
                isr=tuple(p.isr_nodes),
                leader_epoch=p.leader_epoch,
                offline_replicas=tuple(p.offline_replicas),
            )
            for p in result.partitions
        ),
        key=lambda info: info.partition,
    )
    return TopicOutcome(
        TopicDescription(
            name=result.name,
            topic_id=uuid_from_answer("topic_id", result.topic_id),
            is_internal=result.is_internal,
            creation_offset=result.creation_offset,
            partitions=tuple(partitions),
            configs=configs_from_answer(result.configs),
        )
    )


def with_zero_id_errors(
    requested: Sequence[Uuid], outcomes: Mapping[Uuid, TopicOutcome[T]]
) -> dict[Uuid, TopicOutcome[T]]:
    """Kafka fails ZERO_UUID locally: it means "no id" and cannot name a topic."""
    return {
        topic_id: outcomes[topic_id]
        if topic_id != ZERO_UUID
        else TopicOutcome(
            None,
            InvalidTopicError(f"the topic id {topic_id} (ZERO_UUID) cannot name a topic"),
        )
        for topic_id in requested
    }


def with_empty_name_errors(
    requested: Sequence[str], outcomes: Mapping[str, TopicOutcome[T]]
) -> dict[str, TopicOutcome[T]]:
    """Kafka fails an empty topic name locally, without asking the server."""
    return {
        name: outcomes[name]
        if name
        else TopicOutcome(None, InvalidTopicError("an empty string is not a topic name"))
        for name in requested
    }
