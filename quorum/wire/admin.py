"""The ``AdminService`` messages (``proto/quorum/rpc/v1/admin.proto``) as the controller's
requests (``quorum/controller/requests.py``), and the controller's results back
(docs/conventions.md#wire). The services of quorum/server/admin_service.py decide; this module
only translates.

A topic id is 16 bytes, or empty for "none" (``ZERO_UUID``; KIP-516: then the name counts). An
id of any other length is a ``ValueError`` naming the field, which the service answers
INVALID_REQUEST. ``None`` names and messages of the core are empty strings on the wire.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from quorum.controller.requests import (
    AllocateProducerIdsRequest,
    AlterPartitionItem,
    AlterPartitionRequest,
    AlterPartitionResponse,
    AlterPartitionTopic,
    BrokerHeartbeatRequest,
    CreatableReplicaAssignment,
    CreatableTopic,
    CreatePartitionsResult,
    CreatePartitionsTopic,
    CreateTopicResult,
    DeleteTopic,
    DeleteTopicResult,
    DescribeTopic,
    ElectionType,
    ElectLeadersRequest,
    ElectLeadersResponse,
    RegisterBrokerRequest,
    TopicDescription,
)
from quorum.ids import ZERO_UUID, InvalidUuidError, Uuid
from quorum.metadata.records import BrokerEndpoint
from quorum.rpc.v1 import admin_pb2

if TYPE_CHECKING:
    from google.protobuf.internal.containers import RepeatedCompositeFieldContainer

__all__ = [
    "add_alter_partition_results",
    "add_created_topic",
    "add_deleted_topic",
    "add_election_results",
    "add_grown_topic",
    "add_topic_description",
    "allocate_producer_ids_from_proto",
    "alter_partition_from_proto",
    "broker_heartbeat_from_proto",
    "configs_to_proto",
    "creatable_topics_from_proto",
    "deletable_topics_from_proto",
    "elect_leaders_from_proto",
    "partitions_topics_from_proto",
    "register_broker_from_proto",
    "topic_id_from_proto",
    "topic_id_to_proto",
    "topic_refs_from_proto",
]


def topic_id_from_proto(data: bytes, what: str) -> Uuid:
    """A 16-byte id, or ``ZERO_UUID`` for empty bytes; ``ValueError`` naming ``what`` else."""
    if not data:
        return ZERO_UUID
    try:
        return Uuid.from_bytes(data)
    except InvalidUuidError as exc:
        raise ValueError(f"{what} must be 16 bytes, got {len(data)}") from exc


def topic_id_to_proto(topic_id: Uuid) -> bytes:
    return b"" if topic_id == ZERO_UUID else topic_id.bytes


def configs_to_proto(configs: Iterable[tuple[str, str]]) -> list[admin_pb2.TopicConfig]:
    return [admin_pb2.TopicConfig(name=k, value=v) for k, v in configs]


# ----- requests ------------------------------------------------------------------------------


def creatable_topics_from_proto(
    topics: Iterable[admin_pb2.CreatableTopic],
) -> tuple[CreatableTopic, ...]:
    return tuple(
        CreatableTopic(
            name=t.name,
            num_partitions=t.num_partitions,
            replication_factor=t.replication_factor,
            assignments=tuple(
                CreatableReplicaAssignment(a.partition_index, tuple(a.broker_ids))
                for a in t.assignments
            ),
            configs=tuple((c.name, c.value) for c in t.configs),
        )
        for t in topics
    )


def deletable_topics_from_proto(
    topics: Iterable[admin_pb2.DeletableTopic],
) -> tuple[DeleteTopic, ...]:
    return tuple(
        DeleteTopic(
            name=t.name or None,
            topic_id=topic_id_from_proto(t.topic_id, "topic_id"),
            expected_topic_id=topic_id_from_proto(t.expected_topic_id, "expected_topic_id")
            if t.expected_topic_id
            else None,
        )
        for t in topics
    )


def partitions_topics_from_proto(
    topics: Iterable[admin_pb2.CreatePartitionsTopic],
) -> tuple[CreatePartitionsTopic, ...]:
    return tuple(
        CreatePartitionsTopic(
            name=t.name or None,
            count=t.count,
            assignments=tuple(tuple(a.broker_ids) for a in t.assignments)
            if t.assignments
            else None,
            topic_id=topic_id_from_proto(t.topic_id, "topic_id"),
        )
        for t in topics
    )


def topic_refs_from_proto(topics: Iterable[admin_pb2.TopicRef]) -> tuple[DescribeTopic, ...]:
    return tuple(
        DescribeTopic(name=t.name or None, topic_id=topic_id_from_proto(t.topic_id, "topic_id"))
        for t in topics
    )


def register_broker_from_proto(request: admin_pb2.RegisterBrokerRequest) -> RegisterBrokerRequest:
    return RegisterBrokerRequest(
        broker_id=request.broker_id,
        incarnation_id=topic_id_from_proto(request.incarnation_id, "incarnation_id"),
        endpoints=tuple(BrokerEndpoint(e.name, e.host, e.port) for e in request.listeners),
        rack=request.rack or None,
    )


def broker_heartbeat_from_proto(
    request: admin_pb2.BrokerHeartbeatRequest,
) -> BrokerHeartbeatRequest:
    return BrokerHeartbeatRequest(
        broker_id=request.broker_id,
        broker_epoch=request.broker_epoch,
        current_metadata_offset=request.current_metadata_offset,
        want_shut_down=request.want_shut_down,
    )


def allocate_producer_ids_from_proto(
    request: admin_pb2.AllocateProducerIdsRequest,
) -> AllocateProducerIdsRequest:
    return AllocateProducerIdsRequest(
        broker_id=request.broker_id, broker_epoch=request.broker_epoch
    )


def alter_partition_from_proto(request: admin_pb2.AlterPartitionRequest) -> AlterPartitionRequest:
    return AlterPartitionRequest(
        broker_id=request.broker_id,
        broker_epoch=request.broker_epoch,
        topics=tuple(
            AlterPartitionTopic(
                topic_id=topic_id_from_proto(t.topic_id, "topic_id"),
                partitions=tuple(
                    AlterPartitionItem(
                        partition_index=p.partition_index,
                        leader_epoch=p.leader_epoch,
                        new_isr=tuple(p.new_isr),
                        partition_epoch=p.partition_epoch,
                    )
                    for p in t.partitions
                ),
            )
            for t in request.topics
        ),
    )


def elect_leaders_from_proto(request: admin_pb2.ElectLeadersRequest) -> ElectLeadersRequest:
    """``ValueError`` (INVALID_REQUEST) for an unknown election type, or for both
    ``all_partitions`` and a list of partitions."""
    try:
        election_type = ElectionType(request.election_type)
    except ValueError:
        raise ValueError(
            f"election_type {request.election_type} is not one of 0 (PREFERRED), 1 (UNCLEAN)"
        ) from None
    if request.all_partitions and request.partitions:
        raise ValueError("all_partitions is set and partitions are listed: give one or the other")
    partitions = (
        None
        if request.all_partitions
        else tuple((p.topic, p.partition) for p in request.partitions)
    )
    return ElectLeadersRequest(election_type, partitions)


# ----- results -------------------------------------------------------------------------------


def add_created_topic(
    entries: RepeatedCompositeFieldContainer[admin_pb2.CreatableTopicResult],
    result: CreateTopicResult,
) -> None:
    entries.add(
        name=result.name,
        topic_id=topic_id_to_proto(result.topic_id),
        creation_offset=result.creation_offset,
        error_code=int(result.error_code),
        error_message=result.error_message or "",
        num_partitions=result.num_partitions,
        replication_factor=result.replication_factor,
        configs=configs_to_proto(result.configs),
    )


def add_deleted_topic(
    entries: RepeatedCompositeFieldContainer[admin_pb2.DeletableTopicResult],
    result: DeleteTopicResult,
) -> None:
    entries.add(
        name=result.name or "",
        topic_id=topic_id_to_proto(result.topic_id),
        error_code=int(result.error_code),
        error_message=result.error_message or "",
    )


def add_grown_topic(
    entries: RepeatedCompositeFieldContainer[admin_pb2.CreatePartitionsTopicResult],
    result: CreatePartitionsResult,
) -> None:
    entries.add(
        name=result.name or "",
        topic_id=topic_id_to_proto(result.topic_id),
        error_code=int(result.error_code),
        error_message=result.error_message or "",
    )


def add_topic_description(
    entries: RepeatedCompositeFieldContainer[admin_pb2.DescribeTopicResult],
    description: TopicDescription,
) -> None:
    entries.add(
        name=description.name or "",
        topic_id=topic_id_to_proto(description.topic_id),
        error_code=int(description.error_code),
        error_message=description.error_message or "",
        is_internal=description.is_internal,
        creation_offset=description.creation_offset,
        partitions=[
            admin_pb2.PartitionDescription(
                partition_index=p.partition,
                leader_id=p.leader,
                leader_epoch=p.leader_epoch,
                replica_nodes=p.replicas,
                isr_nodes=p.isr,
                offline_replicas=p.offline_replicas,
            )
            for p in description.partitions
        ],
        configs=configs_to_proto(description.configs),
    )


def add_alter_partition_results(
    response: admin_pb2.AlterPartitionResponse, answer: AlterPartitionResponse
) -> None:
    for topic in answer.topics:
        entry = response.topics.add(topic_id=topic_id_to_proto(topic.topic_id))
        for p in topic.partitions:
            entry.partitions.add(
                partition_index=p.partition_index,
                error_code=int(p.error_code),
                error_message=p.error_message or "",
                leader_id=p.leader_id,
                leader_epoch=p.leader_epoch,
                isr=list(p.isr),
                partition_epoch=p.partition_epoch,
            )


def add_election_results(
    response: admin_pb2.ElectLeadersResponse, answer: ElectLeadersResponse
) -> None:
    for r in answer.results:
        response.results.add(
            topic=r.topic,
            partition=r.partition,
            error_code=int(r.error_code),
            error_message=r.error_message or "",
            leader=r.leader,
        )
