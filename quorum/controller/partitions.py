"""CreatePartitions (Kafka's): grow topics' partition counts. Pure, like ``topics``.

Per request entry, in this order (the first failing check decides the code):

==============================  ===========================  ==================================
check                           code                         note
==============================  ===========================  ==================================
more than 1,000 entries         INVALID_REQUEST (all)        ``CREATE_PARTITIONS_TOPICS_MAX``
both a name and an id, neither  INVALID_REQUEST              by id is not in Kafka (ours)
one topic named twice           INVALID_REQUEST (each)       Kafka: "Duplicate topic name."
unknown id                      UNKNOWN_TOPIC_ID             a deleted id says when
unknown name                    UNKNOWN_TOPIC_OR_PARTITION
``__cluster_metadata``          INVALID_REQUEST              the metadata log is one partition
count <= current count          INVALID_PARTITIONS           Kafka's two messages (same count,
                                                             or a decrease)
count above 5,000               INVALID_PARTITIONS           ``TOPIC_PARTITIONS_MAX``
assignments: wrong number       INVALID_REPLICA_ASSIGNMENT   one per new partition
an assignment is bad            INVALID_REPLICA_ASSIGNMENT   empty, another replication factor
                                                             than the topic's, a broker twice,
                                                             unknown or all fenced
replication factor above        INVALID_REPLICATION_FACTOR   placement uses the topic's
unfenced brokers                                             replication factor
batch would pass its limits     POLICY_VIOLATION             10,000 records / 100,000 replicas
==============================  ===========================  ==================================

Authorization (ALTER on the topic, TOPIC_AUTHORIZATION_FAILED) is checked before, by the admin
service, as for every other topic operation.

Placement reuses CreateTopics': the new partitions go round-robin over the unfenced brokers,
rack-aware, from a random start (``place_replicas``), with the replication factor of the
topic's partition 0. The records are one ``PartitionRecord`` per new partition (leader = the
first unfenced replica, leader epoch 0), every topic of the request in one atomic batch, as
Kafka's ``ReplicationControlManager.createPartitions`` writes them. Brokers create the new
directories on their next reconciliation: the image then assigns them.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence

from quorum.controller.names import CLUSTER_METADATA_TOPIC_NAME, quote
from quorum.controller.placement import place_replicas
from quorum.controller.requests import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsResult,
    CreatePartitionsTopic,
)
from quorum.controller.result import ControllerResult
from quorum.controller.topics import broker_counts, check_replica_list, unknown_topic_id_message
from quorum.errors import ErrorCode
from quorum.ids import ZERO_UUID
from quorum.limits import (
    CREATE_PARTITIONS_TOPICS_MAX,
    CREATE_TOPICS_REPLICAS_MAX,
    RECORDS_PER_BATCH_MAX,
    TOPIC_PARTITIONS_MAX,
)
from quorum.metadata.image import BrokerImage, MetadataImage, TopicImage
from quorum.metadata.records import MetadataRecord, PartitionRecord

__all__ = ["create_partitions"]


class _Refusal(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def create_partitions(
    image: MetadataImage, request: CreatePartitionsRequest, *, rng: random.Random
) -> ControllerResult[CreatePartitionsResponse]:
    """Validate ``request`` against ``image``; the records add the accepted partitions.

    Possible codes per entry: NONE, INVALID_REQUEST, UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION, INVALID_PARTITIONS, INVALID_REPLICA_ASSIGNMENT,
    INVALID_REPLICATION_FACTOR, POLICY_VIOLATION (see the module docstring). One result per
    entry, in request order; with ``validate_only`` every check runs and nothing is written.
    ``rng`` picks where round-robin placement starts.
    """
    entries = request.topics
    if len(entries) > CREATE_PARTITIONS_TOPICS_MAX:
        message = (
            f"A CreatePartitions request may hold at most {CREATE_PARTITIONS_TOPICS_MAX} "
            f"topics; this one holds {len(entries)}: split it into several requests"
        )
        return ControllerResult(
            (),
            CreatePartitionsResponse(
                tuple(
                    CreatePartitionsResult(e.name, e.topic_id, ErrorCode.INVALID_REQUEST, message)
                    for e in entries
                )
            ),
        )
    named = Counter(e.name for e in entries if e.name) + Counter(
        str(e.topic_id) for e in entries if e.topic_id != ZERO_UUID
    )
    resolved = [_resolve(image, e, named) for e in entries]
    topic_counts = Counter(t.topic_id for t in resolved if isinstance(t, TopicImage))
    unfenced = [broker for broker in image.brokers.values() if not broker.fenced]
    records: list[MetadataRecord] = []
    replica_slots = 0
    results: list[CreatePartitionsResult] = []
    for entry, found in zip(entries, resolved, strict=True):
        if isinstance(found, CreatePartitionsResult):
            results.append(found)
            continue
        topic = found
        try:
            if topic_counts[topic.topic_id] > 1:
                raise _Refusal(
                    ErrorCode.INVALID_REQUEST,
                    f"Duplicate topic name: topic {quote(topic.name)} (id {topic.topic_id}) is "
                    "named more than once in this request; name each topic once",
                )
            new_records = _plan(image, topic, entry, unfenced, rng)
            slots = sum(len(r.replicas) for r in new_records)
            if len(records) + len(new_records) > RECORDS_PER_BATCH_MAX:
                raise _Refusal(
                    ErrorCode.POLICY_VIOLATION,
                    f"Adding {len(new_records)} partitions to {quote(topic.name)} with the "
                    f"topics before it would write more than {RECORDS_PER_BATCH_MAX} records "
                    "in one atomic batch: grow it in another request",
                )
            if replica_slots + slots > CREATE_TOPICS_REPLICAS_MAX:
                raise _Refusal(
                    ErrorCode.POLICY_VIOLATION,
                    f"Adding {len(new_records)} partitions to {quote(topic.name)} places "
                    f"{slots} replicas; with the topics before it this request would place "
                    f"more than {CREATE_TOPICS_REPLICAS_MAX}: grow it in another request",
                )
        except _Refusal as refusal:
            results.append(
                CreatePartitionsResult(topic.name, topic.topic_id, refusal.code, refusal.message)
            )
            continue
        replica_slots += slots
        if not request.validate_only:
            records.extend(new_records)
        results.append(CreatePartitionsResult(topic.name, topic.topic_id))
    return ControllerResult(tuple(records), CreatePartitionsResponse(tuple(results)))


def _resolve(
    image: MetadataImage, entry: CreatePartitionsTopic, named: Counter[str]
) -> TopicImage | CreatePartitionsResult:
    """The live topic an entry names, or the entry's error result. ``named``: how often each
    name (and each id, as text) appears in the request."""
    by_name = bool(entry.name)
    by_id = entry.topic_id != ZERO_UUID

    def refused(code: ErrorCode, message: str) -> CreatePartitionsResult:
        return CreatePartitionsResult(entry.name, entry.topic_id, code, message)

    if by_name and by_id:
        return refused(
            ErrorCode.INVALID_REQUEST,
            "You may not specify both topic name and topic id: name the topic by one",
        )
    if not by_name and not by_id:
        return refused(
            ErrorCode.INVALID_REQUEST, "Neither topic name nor id were specified: give one"
        )
    key = str(entry.topic_id) if by_id else (entry.name or "")
    if named[key] > 1:
        return refused(
            ErrorCode.INVALID_REQUEST,
            f"Duplicate topic name: {quote(key)} appears {named[key]} times in this request; "
            "name each topic once",
        )
    if by_id:
        topic = image.topic(entry.topic_id)
        if topic is None:
            return refused(
                ErrorCode.UNKNOWN_TOPIC_ID, unknown_topic_id_message(image, entry.topic_id)
            )
    else:
        assert entry.name is not None
        topic = image.topic_by_name(entry.name)
        if topic is None:
            return refused(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"Topic {quote(entry.name)} does not exist: list topics to see which do",
            )
    if topic.name == CLUSTER_METADATA_TOPIC_NAME:
        return CreatePartitionsResult(
            topic.name,
            topic.topic_id,
            ErrorCode.INVALID_REQUEST,
            f"{CLUSTER_METADATA_TOPIC_NAME} is the metadata log itself and has exactly one "
            "partition; its partition count cannot change",
        )
    return topic


def _plan(
    image: MetadataImage,
    topic: TopicImage,
    entry: CreatePartitionsTopic,
    unfenced: Sequence[BrokerImage],
    rng: random.Random,
) -> list[PartitionRecord]:
    """The ``PartitionRecord``s that grow ``topic`` to ``entry.count`` partitions."""
    current = len(topic.partitions)
    count = entry.count
    if count == current:
        raise _Refusal(
            ErrorCode.INVALID_PARTITIONS,
            f"Topic {quote(topic.name)} already has {current} partition(s); give a larger "
            "count to add partitions",
        )
    if count < current:
        raise _Refusal(
            ErrorCode.INVALID_PARTITIONS,
            f"Topic {quote(topic.name)} currently has {current} partition(s); {count} would not "
            "be an increase. Partitions can be added, never removed: give a count above "
            f"{current}",
        )
    if count > TOPIC_PARTITIONS_MAX:
        raise _Refusal(
            ErrorCode.INVALID_PARTITIONS,
            f"Number of partitions {count} is more than the {TOPIC_PARTITIONS_MAX} a topic may "
            "have",
        )
    added = count - current
    replication_factor = topic.replication_factor
    assert replication_factor >= 1, topic  # every topic but the metadata topic has partition 0
    if entry.assignments is not None:
        if len(entry.assignments) != added:
            raise _Refusal(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Attempted to add {added} additional partition(s) to {quote(topic.name)}, but "
                f"{len(entry.assignments)} assignment(s) were given: give one replica list per "
                "new partition",
            )
        replicas: list[tuple[int, ...]] = []
        isrs: list[tuple[int, ...]] = []
        for offset, broker_ids in enumerate(entry.assignments):
            isr = check_replica_list(image, current + offset, broker_ids, replication_factor)
            if isinstance(isr, str):
                raise _Refusal(ErrorCode.INVALID_REPLICA_ASSIGNMENT, isr)
            replicas.append(tuple(broker_ids))
            isrs.append(isr)
    else:
        if replication_factor > len(unfenced):
            raise _Refusal(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Unable to replicate the new partitions of {quote(topic.name)} "
                f"{replication_factor} time(s) (its replication factor): the cluster has only "
                f"{broker_counts(image, unfenced)}. Start and unfence more brokers, or give "
                "the assignments",
            )
        replicas = list(
            place_replicas(
                unfenced,
                num_partitions=added,
                replication_factor=replication_factor,
                start=rng.randrange(len(unfenced)),
            )
        )
        isrs = replicas
    return [
        PartitionRecord(
            topic_id=topic.topic_id,
            partition=current + offset,
            replicas=replica_list,
            isr=isr,
            leader=isr[0],
            leader_epoch=0,
            partition_epoch=0,
        )
        for offset, (replica_list, isr) in enumerate(zip(replicas, isrs, strict=True))
    ]
