"""AlterPartition (Kafka's ``ReplicationControlManager.alterPartition``, KIP-497 by topic id), as
a pure function.

A partition's leader tracks which followers have caught up and asks the active controller to
change the partition's ISR; the controller checks, in Kafka's order, that the request comes from
that leader at the partition's current epochs and names a legal ISR, and writes one
``PartitionChangeRecord`` per changed partition (new ISR, partition epoch + 1). The answer is
sent once the records are committed, like every controller write.

Checks, first failure wins:

1. The broker is registered at ``broker_epoch``, else STALE_BROKER_EPOCH for the whole request
   (also INVALID_REQUEST for the whole request: more than ``ALTER_PARTITION_PARTITIONS_MAX``
   partitions).
2. Per topic: a live topic has the id, else UNKNOWN_TOPIC_ID for each of its partitions.
3. Per partition:

   - the topic has the partition, else UNKNOWN_TOPIC_OR_PARTITION; a partition named twice in
     one request is INVALID_REQUEST the second time;
   - the sender leads it, else NOT_LEADER_OR_FOLLOWER;
   - ``leader_epoch`` is the partition's, else FENCED_LEADER_EPOCH (older or newer: the
     leader acts on a view the controller does not have);
   - ``partition_epoch`` is the partition's, else INVALID_UPDATE_VERSION;
   - ``new_isr`` is not empty, has no duplicates, names only replicas and holds the leader,
     else INVALID_REQUEST;
   - every broker it adds is registered and unfenced, else INELIGIBLE_REPLICA (a broker in
     controlled shutdown is fenced at once here, so "fenced" covers it); removing one is
     always allowed;
   - the same members as the current ISR: success with the current state, no record.

A refusal changes nothing and answers the partition's current state, so the leader can
refresh its view. The new ISR is stored in replica order (the order fencing and unfencing keep),
whatever order the leader sent.
"""

from __future__ import annotations

from typing import Final

from quorum.controller.requests import (
    AlterPartitionItem,
    AlterPartitionRequest,
    AlterPartitionResponse,
    AlterPartitionResult,
    AlterPartitionTopicResult,
)
from quorum.controller.result import ControllerResult
from quorum.errors import ErrorCode
from quorum.ids import Uuid
from quorum.limits import INT32_MAX, RECORDS_PER_BATCH_MAX
from quorum.metadata.image import MetadataImage, PartitionImage
from quorum.metadata.records import PartitionChangeRecord

__all__ = ["ALTER_PARTITION_PARTITIONS_MAX", "alter_partition"]

# At most one record per partition, all in one atomic batch.
ALTER_PARTITION_PARTITIONS_MAX: Final = RECORDS_PER_BATCH_MAX


def alter_partition(
    image: MetadataImage, request: AlterPartitionRequest
) -> ControllerResult[AlterPartitionResponse]:
    """Possible codes: top level NONE, STALE_BROKER_EPOCH, INVALID_REQUEST; per partition NONE,
    UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER,
    FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION, INVALID_REQUEST, INELIGIBLE_REPLICA."""
    broker = image.brokers.get(request.broker_id)
    if broker is None:
        return _refused(
            ErrorCode.STALE_BROKER_EPOCH,
            f"broker {request.broker_id} is not registered: only a registered partition leader "
            "may alter partitions (register, then ask again)",
        )
    if broker.broker_epoch != request.broker_epoch:
        return _refused(
            ErrorCode.STALE_BROKER_EPOCH,
            f"expected broker epoch {broker.broker_epoch} for broker {request.broker_id}, got "
            f"{request.broker_epoch}: register again to get the current epoch",
        )
    count = sum(len(t.partitions) for t in request.topics)
    if count > ALTER_PARTITION_PARTITIONS_MAX:
        return _refused(
            ErrorCode.INVALID_REQUEST,
            f"{count} partitions in one AlterPartition request; at most "
            f"{ALTER_PARTITION_PARTITIONS_MAX} are allowed: split it",
        )
    records: list[PartitionChangeRecord] = []
    topics: list[AlterPartitionTopicResult] = []
    seen: set[tuple[Uuid, int]] = set()
    for entry in request.topics:
        topic = image.topic(entry.topic_id)
        results: list[AlterPartitionResult] = []
        for item in entry.partitions:
            if topic is None:
                results.append(
                    AlterPartitionResult(
                        item.partition_index,
                        ErrorCode.UNKNOWN_TOPIC_ID,
                        f"no live topic has id {entry.topic_id}: it was deleted, or never "
                        "existed; stop replicating it",
                    )
                )
                continue
            key = (entry.topic_id, item.partition_index)
            state = topic.partitions.get(item.partition_index)
            if state is None:
                results.append(
                    AlterPartitionResult(
                        item.partition_index,
                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        f"topic {topic.name!r} ({entry.topic_id}) has no partition "
                        f"{item.partition_index}: it has partitions 0 to "
                        f"{len(topic.partitions) - 1}",
                    )
                )
                continue
            if key in seen:
                results.append(
                    _result(
                        state,
                        ErrorCode.INVALID_REQUEST,
                        f"partition {topic.name}-{item.partition_index} is named more than once "
                        "in this request: name each partition at most once",
                    )
                )
                continue
            seen.add(key)
            code, message = _check(image, request.broker_id, f"{topic.name}-", state, item)
            if code is not ErrorCode.NONE:
                results.append(_result(state, code, message))
                continue
            new_isr = tuple(r for r in state.replicas if r in item.new_isr)
            if set(new_isr) == set(state.isr):
                results.append(_result(state))
                continue
            assert state.partition_epoch < INT32_MAX, state
            records.append(
                PartitionChangeRecord(
                    topic_id=entry.topic_id,
                    partition=state.partition,
                    isr=new_isr,
                    partition_epoch=state.partition_epoch + 1,
                )
            )
            results.append(
                _result(state._replace(isr=new_isr, partition_epoch=state.partition_epoch + 1))
            )
        topics.append(AlterPartitionTopicResult(entry.topic_id, tuple(results)))
    return ControllerResult(tuple(records), AlterPartitionResponse(topics=tuple(topics)))


def _check(
    image: MetadataImage,
    sender: int,
    prefix: str,
    state: PartitionImage,
    item: AlterPartitionItem,
) -> tuple[ErrorCode, str]:
    """The first problem of ``item`` against ``state`` (Kafka's order), or (NONE, "")."""
    name = f"{prefix}{state.partition}"
    if state.leader != sender:
        leader = "no leader" if state.leader < 0 else f"leader {state.leader}"
        return (
            ErrorCode.NOT_LEADER_OR_FOLLOWER,
            f"broker {sender} does not lead partition {name} ({leader} at leader epoch "
            f"{state.leader_epoch}): only the partition's leader may alter its ISR",
        )
    if item.leader_epoch != state.leader_epoch:
        age = "older" if item.leader_epoch < state.leader_epoch else "newer"
        return (
            ErrorCode.FENCED_LEADER_EPOCH,
            f"leader epoch {item.leader_epoch} of partition {name} is {age} than the "
            f"controller's {state.leader_epoch}: refresh the partition's state from the "
            "metadata log and ask again at its leader epoch",
        )
    if item.partition_epoch != state.partition_epoch:
        return (
            ErrorCode.INVALID_UPDATE_VERSION,
            f"partition epoch {item.partition_epoch} of partition {name} is not the "
            f"controller's {state.partition_epoch}: the partition changed since; refresh its "
            "state and ask again at its partition epoch",
        )
    problem = _isr_problem(state, item.new_isr, sender)
    if problem is not None:
        return ErrorCode.INVALID_REQUEST, f"new ISR {list(item.new_isr)} of {name} {problem}"
    added = sorted(set(item.new_isr) - set(state.isr))
    ineligible: list[str] = []
    for broker_id in added:
        broker = image.brokers.get(broker_id)
        if broker is None:
            ineligible.append(f"{broker_id} (not registered)")
        elif broker.fenced:
            ineligible.append(f"{broker_id} (fenced or in controlled shutdown)")
    if ineligible:
        return (
            ErrorCode.INELIGIBLE_REPLICA,
            f"new ISR {list(item.new_isr)} of {name} adds {', '.join(ineligible)}: only "
            "registered, unfenced brokers may join an ISR (removing one is always allowed)",
        )
    return ErrorCode.NONE, ""


def _isr_problem(state: PartitionImage, new_isr: tuple[int, ...], leader: int) -> str | None:
    allowed = f"a non-empty set of its replicas {list(state.replicas)} that holds the leader"
    if not new_isr:
        return f"is empty: give {allowed}"
    if len(set(new_isr)) != len(new_isr):
        return f"names a broker twice: give {allowed}"
    strangers = sorted(set(new_isr) - set(state.replicas))
    if strangers:
        return f"names {strangers}, not replicas of the partition: give {allowed}"
    if leader not in new_isr:
        return f"leaves out the leader {leader}: give {allowed}"
    return None


def _result(
    state: PartitionImage, code: ErrorCode = ErrorCode.NONE, message: str | None = None
) -> AlterPartitionResult:
    return AlterPartitionResult(
        partition_index=state.partition,
        error_code=code,
        error_message=message,
        leader_id=state.leader,
        leader_epoch=state.leader_epoch,
        isr=state.isr,
        partition_epoch=state.partition_epoch,
    )


def _refused(code: ErrorCode, message: str) -> ControllerResult[AlterPartitionResponse]:
    return ControllerResult((), AlterPartitionResponse(error_code=code, error_message=message))
