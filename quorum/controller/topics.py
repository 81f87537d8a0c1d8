"""CreateTopics and DeleteTopics: validate against an image, return records and a response.

Pure functions of (image, request, inputs): they never mutate the image; the records they
return change it only when replayed
(docs/conventions.md#propose-and-replay).

CreateTopics, per topic, in this order (the first failing check decides the code):

==============================  ===========================  ==================================
check                           code                         note
==============================  ===========================  ==================================
more than 1,000 topics          INVALID_REQUEST (all)        ``CREATE_TOPICS_TOPICS_MAX``
name given twice in request     INVALID_REQUEST (each)       Kafka: "Duplicate topic name."
``__cluster_metadata``          INVALID_REQUEST              never creatable (Kafka)
illegal or reserved name        INVALID_TOPIC_EXCEPTION      see ``names``
name exists                     TOPIC_ALREADY_EXISTS
collides once ``.``=``_``       INVALID_TOPIC_EXCEPTION      also with a topic earlier in the
                                                             same request
assignments and numbers both    INVALID_REQUEST              Kafka's message
partitions 0, < -1, too many    INVALID_PARTITIONS           -1 = ``default_num_partitions``
replication factor bad / above  INVALID_REPLICATION_FACTOR   -1 = ``default_replication_factor``;
unfenced brokers                                             the message counts brokers
bad manual assignment           INVALID_REPLICA_ASSIGNMENT   gaps, duplicates, unknown or all
                                                             fenced brokers, unequal lengths
configs                         INVALID_CONFIG               see ``configs``
batch would pass its limits     POLICY_VIOLATION             10,000 records / 100,000 replicas
==============================  ===========================  ==================================

A created topic's records are its ``TopicRecord``, its ``ConfigRecord``s (sorted by name), its
``PartitionRecord``s (by index); all topics of a request share one atomic batch. The topic id is
drawn here, at proposal time, and drawn again if it was ever used (or is reserved). System
topic names (``__consumer_offsets``, ...) are always internal; other topics are internal when
created with ``internal=true`` (KIP-619). A manual assignment may name fenced brokers as long
as one replica per partition is unfenced: the ISR is its unfenced replicas and the leader the
first of them.

DeleteTopics (v6, KIP-516): see ``delete_topics``.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from quorum.controller.configs import CONFIG_MIN_INSYNC_REPLICAS, validate_topic_configs
from quorum.controller.names import (
    CLUSTER_METADATA_TOPIC_NAME,
    CREATABLE_SYSTEM_TOPIC_NAMES,
    SYSTEM_TOPIC_NAMES,
    quote,
    topic_name_error,
)
from quorum.controller.placement import place_replicas
from quorum.controller.requests import (
    CreatableTopic,
    CreateTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from quorum.controller.result import ControllerResult
from quorum.errors import ErrorCode
from quorum.ids import RESERVED_UUIDS, ZERO_UUID, Uuid
from quorum.limits import (
    CREATE_TOPICS_REPLICAS_MAX,
    CREATE_TOPICS_TOPICS_MAX,
    DELETE_TOPICS_TOPICS_MAX,
    RECORDS_PER_BATCH_MAX,
    REPLICATION_FACTOR_MAX,
    TOPIC_ID_DRAWS_MAX,
    TOPIC_PARTITIONS_MAX,
)
from quorum.metadata.image import BrokerImage, MetadataImage, topic_collision_key
from quorum.metadata.records import (
    ConfigRecord,
    ConfigResourceType,
    MetadataRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)

__all__ = [
    "TopicDefaults",
    "broker_counts",
    "check_replica_list",
    "create_topics",
    "delete_topics",
    "draw_topic_id",
    "unknown_topic_id_message",
]


@dataclass(frozen=True, slots=True)
class TopicDefaults:
    """What -1 means in CreateTopics (Kafka's ``num.partitions`` and
    ``default.replication.factor``, both 1 by default)."""

    num_partitions: int = 1
    replication_factor: int = 1

    def __post_init__(self) -> None:
        assert 1 <= self.num_partitions <= TOPIC_PARTITIONS_MAX, self
        assert 1 <= self.replication_factor <= REPLICATION_FACTOR_MAX, self


class _Refusal(Exception):
    """One topic is refused with ``code``; ``message`` says why and what is allowed."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class _TopicPlan:
    internal: bool
    configs: tuple[tuple[str, str], ...]
    replicas: tuple[tuple[int, ...], ...]
    isrs: tuple[tuple[int, ...], ...]

    @property
    def record_count(self) -> int:
        return 1 + len(self.configs) + len(self.replicas)

    @property
    def replica_slots(self) -> int:
        return sum(len(replicas) for replicas in self.replicas)


def draw_topic_id(new_topic_id: Callable[[], Uuid], image: MetadataImage, drawn: set[Uuid]) -> Uuid:
    """A fresh id: never reserved, never used by a live or deleted topic, never drawn before in
    this request, never printed with a leading ``-``. Asserts if the generator keeps failing."""
    for _ in range(TOPIC_ID_DRAWS_MAX):
        candidate = new_topic_id()
        if (
            candidate in RESERVED_UUIDS
            or candidate in drawn
            or image.is_topic_id_used(candidate)
            or str(candidate).startswith("-")
        ):
            continue
        drawn.add(candidate)
        return candidate
    raise AssertionError(
        f"new_topic_id returned {TOPIC_ID_DRAWS_MAX} used or reserved ids in a row: "
        "the id generator is broken"
    )


# ----- CreateTopics -------------------------------------------------------------------------


def create_topics(
    image: MetadataImage,
    request: CreateTopicsRequest,
    *,
    next_offset: int,
    new_topic_id: Callable[[], Uuid],
    rng: random.Random,
    defaults: TopicDefaults = TopicDefaults(),
) -> ControllerResult[CreateTopicsResponse]:
    """Validate ``request`` against ``image``; the records create the accepted topics.

    Possible codes per topic: NONE, INVALID_REQUEST, INVALID_TOPIC_EXCEPTION,
    TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR,
    INVALID_REPLICA_ASSIGNMENT, INVALID_CONFIG, POLICY_VIOLATION. One result per request
    entry, in request order. ``rng`` picks where round-robin placement starts.
    """
    topics = request.topics
    if len(topics) > CREATE_TOPICS_TOPICS_MAX:
        message = (
            f"A CreateTopics request may hold at most {CREATE_TOPICS_TOPICS_MAX} topics; this "
            f"one holds {len(topics)}: split it into several requests"
        )
        return ControllerResult(
            (),
            CreateTopicsResponse(
                tuple(_create_error(t.name, ErrorCode.INVALID_REQUEST, message) for t in topics)
            ),
        )
    counts = Counter(topic.name for topic in topics)
    unfenced = [broker for broker in image.brokers.values() if not broker.fenced]
    records: list[MetadataRecord] = []
    results: list[CreateTopicResult] = []
    drawn: set[Uuid] = set()
    created_keys: dict[str, str] = {}  # collision key -> name accepted earlier in this request
    record_count = 0
    replica_slots = 0
    for topic in topics:
        try:
            if counts[topic.name] > 1:
                raise _Refusal(
                    ErrorCode.INVALID_REQUEST,
                    f"Duplicate topic name: {quote(topic.name)} appears {counts[topic.name]} "
                    "times in this request; name each topic once",
                )
            _check_new_name(image, topic.name, created_keys)
            plan = _plan_topic(image, topic, unfenced, rng, defaults)
            if record_count + plan.record_count > RECORDS_PER_BATCH_MAX:
                raise _Refusal(
                    ErrorCode.POLICY_VIOLATION,
                    f"Creating {quote(topic.name)} needs {plan.record_count} records; with the "
                    f"topics before it this request would write more than "
                    f"{RECORDS_PER_BATCH_MAX} records in one atomic batch: create it in "
                    "another request",
                )
            if replica_slots + plan.replica_slots > CREATE_TOPICS_REPLICAS_MAX:
                raise _Refusal(
                    ErrorCode.POLICY_VIOLATION,
                    f"Creating {quote(topic.name)} places {plan.replica_slots} replicas; with "
                    f"the topics before it this request would place more than "
                    f"{CREATE_TOPICS_REPLICAS_MAX}: create it in another request",
                )
        except _Refusal as refusal:
            results.append(_create_error(topic.name, refusal.code, refusal.message))
            continue
        record_count += plan.record_count
        replica_slots += plan.replica_slots
        created_keys[topic_collision_key(topic.name)] = topic.name
        topic_id, creation_offset = ZERO_UUID, -1
        if not request.validate_only:
            topic_id = draw_topic_id(new_topic_id, image, drawn)
            creation_offset = next_offset + len(records)
            records.extend(_topic_records(topic.name, topic_id, plan))
        results.append(
            CreateTopicResult(
                name=topic.name,
                topic_id=topic_id,
                creation_offset=creation_offset,
                num_partitions=len(plan.replicas),
                replication_factor=len(plan.replicas[0]),
                configs=plan.configs,
            )
        )
    return ControllerResult(tuple(records), CreateTopicsResponse(tuple(results)))


def _create_error(name: str, code: ErrorCode, message: str) -> CreateTopicResult:
    return CreateTopicResult(name=name, error_code=code, error_message=message)


def _topic_records(name: str, topic_id: Uuid, plan: _TopicPlan) -> list[MetadataRecord]:
    records: list[MetadataRecord] = [
        TopicRecord(name=name, topic_id=topic_id, internal=plan.internal)
    ]
    records.extend(
        ConfigRecord(
            resource_type=ConfigResourceType.TOPIC, resource_name=name, name=key, value=value
        )
        for key, value in plan.configs
    )
    records.extend(
        PartitionRecord(
            topic_id=topic_id,
            partition=index,
            replicas=replicas,
            isr=isr,
            leader=isr[0],
            leader_epoch=0,
            partition_epoch=0,
        )
        for index, (replicas, isr) in enumerate(zip(plan.replicas, plan.isrs, strict=True))
    )
    return records


def _check_new_name(image: MetadataImage, name: str, created_keys: dict[str, str]) -> None:
    if name == CLUSTER_METADATA_TOPIC_NAME:
        raise _Refusal(
            ErrorCode.INVALID_REQUEST,
            f"Creation of internal topic {CLUSTER_METADATA_TOPIC_NAME} is prohibited: it is the "
            "metadata log itself, and the controller creates it",
        )
    problem = topic_name_error(name)
    if problem is not None:
        raise _Refusal(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
    existing = image.topic_by_name(name)
    if existing is not None:
        raise _Refusal(
            ErrorCode.TOPIC_ALREADY_EXISTS,
            f"Topic {name!r} already exists (topic id {existing.topic_id}); delete it first, "
            "or choose another name",
        )
    colliding = image.colliding_topic_name(name)
    if colliding is not None:
        raise _Refusal(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic '{name}' collides with existing topic: {colliding} (names that differ "
            "only by '.' and '_' collide in metric names); choose another name",
        )
    earlier = created_keys.get(topic_collision_key(name))
    if earlier is not None:
        raise _Refusal(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic '{name}' collides with topic {earlier} created earlier in this request "
            "(names that differ only by '.' and '_' collide); create only one of them",
        )


def _plan_topic(
    image: MetadataImage,
    topic: CreatableTopic,
    unfenced: Sequence[BrokerImage],
    rng: random.Random,
    defaults: TopicDefaults,
) -> _TopicPlan:
    if topic.assignments:
        if topic.num_partitions != -1 or topic.replication_factor != -1:
            raise _Refusal(
                ErrorCode.INVALID_REQUEST,
                "Both numPartitions or replicationFactor and replicasAssignments were set. "
                "Both cannot be used at the same time: give -1 for both with an assignment",
            )
        replicas, isrs = _check_assignments(image, topic)
    else:
        num_partitions = _check_partitions(topic.num_partitions, defaults)
        replication_factor = _check_replication_factor(
            image, topic.replication_factor, unfenced, defaults
        )
        replicas = place_replicas(
            unfenced,
            num_partitions=num_partitions,
            replication_factor=replication_factor,
            start=rng.randrange(len(unfenced)),
        )
        isrs = replicas
    validated = validate_topic_configs(topic.configs)
    if isinstance(validated, str):
        raise _Refusal(ErrorCode.INVALID_CONFIG, validated)
    internal = topic.name in CREATABLE_SYSTEM_TOPIC_NAMES
    if validated.internal is not None:
        if internal and not validated.internal:
            raise _Refusal(
                ErrorCode.INVALID_CONFIG,
                f"{topic.name} is a system topic and always internal: drop internal=false",
            )
        internal = validated.internal
    replication_factor = len(replicas[0])
    for key, value in validated.configs:
        if key == CONFIG_MIN_INSYNC_REPLICAS and int(value) > replication_factor:
            raise _Refusal(
                ErrorCode.INVALID_CONFIG,
                f"{CONFIG_MIN_INSYNC_REPLICAS}={value} is more than the replication factor "
                f"{replication_factor}: writes with acks=all could never succeed. Lower it to "
                f"at most {replication_factor}",
            )
    return _TopicPlan(internal=internal, configs=validated.configs, replicas=replicas, isrs=isrs)


def _check_partitions(num_partitions: int, defaults: TopicDefaults) -> int:
    if num_partitions == -1:
        return defaults.num_partitions
    if num_partitions <= 0:
        raise _Refusal(
            ErrorCode.INVALID_PARTITIONS,
            f"Number of partitions was set to an invalid non-positive value ({num_partitions}): "
            f"give 1 to {TOPIC_PARTITIONS_MAX}, or -1 for the default "
            f"({defaults.num_partitions})",
        )
    if num_partitions > TOPIC_PARTITIONS_MAX:
        raise _Refusal(
            ErrorCode.INVALID_PARTITIONS,
            f"Number of partitions {num_partitions} is more than the {TOPIC_PARTITIONS_MAX} "
            "a topic may have",
        )
    return num_partitions


def broker_counts(image: MetadataImage, unfenced: Sequence[BrokerImage]) -> str:
    fenced = sorted(b.broker_id for b in image.brokers.values() if b.fenced)
    text = f"{len(unfenced)} unfenced broker(s) of {len(image.brokers)} registered"
    if fenced:
        text += f"; fenced: {fenced[:10]}{' ...' if len(fenced) > 10 else ''}"
    return text


def _check_replication_factor(
    image: MetadataImage,
    replication_factor: int,
    unfenced: Sequence[BrokerImage],
    defaults: TopicDefaults,
) -> int:
    if replication_factor == -1:
        replication_factor = defaults.replication_factor
    elif not 1 <= replication_factor <= REPLICATION_FACTOR_MAX:
        raise _Refusal(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Replication factor must be in 1..{REPLICATION_FACTOR_MAX}, or -1 to use the "
            f"default value ({defaults.replication_factor}); got {replication_factor}",
        )
    if replication_factor > len(unfenced):
        raise _Refusal(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Unable to replicate the partition {replication_factor} time(s): the cluster has "
            f"only {broker_counts(image, unfenced)}. Lower the replication factor, or start "
            "and unfence more brokers",
        )
    return replication_factor


def _check_assignments(
    image: MetadataImage, topic: CreatableTopic
) -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, ...], ...]]:
    assignments = topic.assignments

    def refuse(message: str) -> _Refusal:
        return _Refusal(ErrorCode.INVALID_REPLICA_ASSIGNMENT, message)

    if len(assignments) > TOPIC_PARTITIONS_MAX:
        raise _Refusal(
            ErrorCode.INVALID_PARTITIONS,
            f"The manual assignment has {len(assignments)} partitions, more than the "
            f"{TOPIC_PARTITIONS_MAX} a topic may have",
        )
    by_index: dict[int, tuple[int, ...]] = {}
    for assignment in assignments:
        index = assignment.partition_index
        if index in by_index:
            raise refuse(f"Found multiple manual partition assignments for partition {index}")
        if not 0 <= index < len(assignments):
            raise refuse(
                f"Partitions should be a consecutive 0-based integer sequence: the manual "
                f"assignment of {len(assignments)} partition(s) names partition {index}"
            )
        by_index[index] = assignment.broker_ids
    replicas: list[tuple[int, ...]] = []
    isrs: list[tuple[int, ...]] = []
    for index in range(len(assignments)):
        broker_ids = by_index[index]
        expected = len(replicas[0]) if replicas else None
        isr_or_error = check_replica_list(image, index, broker_ids, expected)
        if isinstance(isr_or_error, str):
            raise refuse(isr_or_error)
        replicas.append(tuple(broker_ids))
        isrs.append(isr_or_error)
    return tuple(replicas), tuple(isrs)


def check_replica_list(
    image: MetadataImage,
    index: int,
    broker_ids: Sequence[int],
    replication_factor: int | None,
) -> tuple[int, ...] | str:
    """Check the manual replica list of partition ``index``: not empty, ``replication_factor``
    replicas when that is given (the topic's other partitions have that many), no broker twice,
    every broker registered, at least one unfenced. Returns the partition's ISR (its unfenced
    replicas, in order) or, for INVALID_REPLICA_ASSIGNMENT, why the list is refused."""
    if not broker_ids:
        return f"The manual partition assignment of partition {index} is empty"
    if replication_factor is not None and len(broker_ids) != replication_factor:
        return (
            f"The manual partition assignment includes a partition ({index}) with "
            f"{len(broker_ids)} replica(s), but this is not consistent with previous "
            f"partitions, which have {replication_factor} replica(s)"
        )
    if len(broker_ids) > REPLICATION_FACTOR_MAX:
        return (
            f"Partition {index} has {len(broker_ids)} replicas; at most "
            f"{REPLICATION_FACTOR_MAX} are allowed"
        )
    seen: set[int] = set()
    for broker_id in broker_ids:
        if broker_id in seen:
            return (
                f"The manual partition assignment of partition {index} includes broker "
                f"{broker_id} more than once"
            )
        seen.add(broker_id)
        if broker_id not in image.brokers:
            registered = sorted(image.brokers)
            return (
                f"The manual partition assignment of partition {index} includes broker "
                f"{quote(broker_id)}, but no such broker is registered (registered: "
                f"{registered[:20]}{' ...' if len(registered) > 20 else ''})"
            )
    isr = tuple(b for b in broker_ids if not image.brokers[b].fenced)
    if not isr:
        return (
            f"All brokers specified in the manual partition assignment for partition "
            f"{index} ({list(broker_ids)}) are fenced: include an unfenced broker"
        )
    return isr


# ----- DeleteTopics -------------------------------------------------------------------------


def unknown_topic_id_message(image: MetadataImage, topic_id: Uuid) -> str:
    deleted = image.deleted_topics.get(topic_id)
    if deleted is not None:
        return (
            f"Topic id {topic_id} was deleted (at metadata offset {deleted.deletion_offset}); "
            "topic ids are never reused, so a topic created since under the same name has "
            "another id"
        )
    return f"No topic has id {topic_id}: list topics to see the current ids"


def _unknown_name_message(name: str) -> str:
    return f"Topic {quote(name)} does not exist: list topics to see which do"


def delete_topics(
    image: MetadataImage, request: DeleteTopicsRequest
) -> ControllerResult[DeleteTopicsResponse]:
    """Validate ``request`` against ``image``; the records delete the accepted topics.

    Each entry names a topic by id, or by name when its id is ``ZERO_UUID`` (KIP-516). Possible
    codes per entry, checked in this order:

    - INVALID_REQUEST: more than 1,000 entries (all of them); both a name and an id, or
      neither; an ``expected_topic_id`` with an id; the same name or id twice, or one topic
      named both by name and by id (every entry involved).
    - UNKNOWN_TOPIC_ID: no live topic has the id (a deleted id says when it was deleted).
    - UNKNOWN_TOPIC_OR_PARTITION: no live topic has the name.
    - INCONSISTENT_TOPIC_ID: deleting by name with ``expected_topic_id``, and the name now
      belongs to another id (it was deleted and recreated).
    - TOPIC_DELETION_DISABLED: a system topic (``__consumer_offsets``, ``__transaction_state``,
      ``__share_group_state``, ``__cluster_metadata``) (KIP-619: user-defined internal topics
      can be deleted; system-defined ones cannot).

    Deletion is immediate: a committed ``RemoveTopicRecord`` is a deleted topic, and its name
    can be reused at once (with a new id).
    """
    entries = request.topics
    if len(entries) > DELETE_TOPICS_TOPICS_MAX:
        message = (
            f"A DeleteTopics request may hold at most {DELETE_TOPICS_TOPICS_MAX} topics; this "
            f"one holds {len(entries)}: split it into several requests"
        )
        return ControllerResult(
            (),
            DeleteTopicsResponse(
                tuple(
                    DeleteTopicResult(e.name, e.topic_id, ErrorCode.INVALID_REQUEST, message)
                    for e in entries
                )
            ),
        )
    results: list[DeleteTopicResult | None] = [None] * len(entries)

    def fail(index: int, code: ErrorCode, message: str, name: str | None, tid: Uuid) -> None:
        results[index] = DeleteTopicResult(name, tid, code, message)

    # 1. Shape of each entry.
    for index, entry in enumerate(entries):
        by_name = bool(entry.name)
        by_id = entry.topic_id != ZERO_UUID
        if by_name and by_id:
            fail(
                index,
                ErrorCode.INVALID_REQUEST,
                "You may not specify both topic name and topic id: name the topic by one",
                entry.name,
                entry.topic_id,
            )
        elif not by_name and not by_id:
            fail(
                index,
                ErrorCode.INVALID_REQUEST,
                "Neither topic name nor id were specified: give one",
                entry.name,
                entry.topic_id,
            )
        elif by_id and entry.expected_topic_id is not None:
            fail(
                index,
                ErrorCode.INVALID_REQUEST,
                "expected_topic_id is a precondition for deleting by name; when deleting by "
                "id, leave it unset",
                entry.name,
                entry.topic_id,
            )
    # 2. The same name or id twice.
    name_counts = Counter(e.name for i, e in enumerate(entries) if results[i] is None and e.name)
    id_counts = Counter(
        e.topic_id for i, e in enumerate(entries) if results[i] is None and not e.name
    )
    for index, entry in enumerate(entries):
        if results[index] is not None:
            continue
        if entry.name and name_counts[entry.name] > 1:
            fail(
                index,
                ErrorCode.INVALID_REQUEST,
                f"Duplicate topic name: {quote(entry.name)} appears {name_counts[entry.name]} "
                "times in this request",
                entry.name,
                ZERO_UUID,
            )
        elif not entry.name and id_counts[entry.topic_id] > 1:
            fail(
                index,
                ErrorCode.INVALID_REQUEST,
                f"Duplicate topic id: {entry.topic_id} appears {id_counts[entry.topic_id]} "
                "times in this request",
                None,
                entry.topic_id,
            )
    # 3. Resolve to live topics.
    resolved: dict[int, Uuid] = {}
    for index, entry in enumerate(entries):
        if results[index] is not None:
            continue
        if entry.name:
            topic = image.topic_by_name(entry.name)
            if topic is None:
                fail(
                    index,
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    _unknown_name_message(entry.name),
                    entry.name,
                    ZERO_UUID,
                )
                continue
            expected = entry.expected_topic_id
            if expected is not None and expected != topic.topic_id:
                fail(
                    index,
                    ErrorCode.INCONSISTENT_TOPIC_ID,
                    f"Topic {entry.name!r} has id {topic.topic_id}, not the expected "
                    f"{expected}: it was deleted and created again since. Describe it and "
                    "retry with its current id if you mean to delete it",
                    entry.name,
                    topic.topic_id,
                )
                continue
        else:
            found = image.topic(entry.topic_id)
            if found is None:
                fail(
                    index,
                    ErrorCode.UNKNOWN_TOPIC_ID,
                    unknown_topic_id_message(image, entry.topic_id),
                    None,
                    entry.topic_id,
                )
                continue
            topic = found
        resolved[index] = topic.topic_id
    # 4. One topic named twice (once by name, once by id).
    resolved_counts = Counter(resolved.values())
    for index, topic_id in resolved.items():
        topic = image.topics_by_id[topic_id]
        if resolved_counts[topic_id] > 1:
            fail(
                index,
                ErrorCode.INVALID_REQUEST,
                f"Topic {topic.name!r} (id {topic_id}) is named more than once in this "
                "request (by name and by id): name it once",
                topic.name,
                topic_id,
            )
        elif topic.name in SYSTEM_TOPIC_NAMES:
            fail(
                index,
                ErrorCode.TOPIC_DELETION_DISABLED,
                f"Topic {topic.name} is a system topic and cannot be deleted (KIP-619); only "
                "user-defined internal topics (created with internal=true) can be",
                topic.name,
                topic_id,
            )
    # 5. The rest are deleted, in request order.
    records: list[MetadataRecord] = []
    final: list[DeleteTopicResult] = []
    for index, result in enumerate(results):
        if result is not None:
            final.append(result)
            continue
        topic = image.topics_by_id[resolved[index]]
        records.append(RemoveTopicRecord(topic_id=topic.topic_id))
        final.append(DeleteTopicResult(topic.name, topic.topic_id))
    return ControllerResult(tuple(records), DeleteTopicsResponse(tuple(final)))
