"""ElectLeaders (Kafka's ``ReplicationControlManager.electLeaders``), as a pure function.

An administrator asks the controller to elect leaders, for a list of partitions (by topic
name) or for every partition:

- **PREFERRED** (0): the partition's first replica, its preferred leader, leads again. Already
  leading: ELECTION_NOT_NEEDED. Not in the ISR, fenced or unregistered:
  PREFERRED_LEADER_NOT_AVAILABLE (retriable: once the leader has added it back to the ISR the
  election can succeed). Else one ``PartitionChangeRecord``: leader = it, leader epoch + 1,
  partition epoch + 1, the ISR unchanged.
- **UNCLEAN** (1): only for a partition without a leader (else ELECTION_NOT_NEEDED). An
  available ISR member is elected first (as Kafka does; the controller's own rules leave none
  in a leaderless partition); else the first unfenced, registered replica in replica order,
  with the ISR [it]: what only the old ISR held may be lost, which is what the administrator
  asked for, whatever the topic's ``unclean.leader.election.enable``. None:
  ELIGIBLE_LEADERS_NOT_AVAILABLE.

A partition that does not exist is UNKNOWN_TOPIC_OR_PARTITION. A partition named twice counts
once (Kafka takes a set). With "all partitions" (topic name order, then partition order) the
partitions that need no election are left out of the answer, as Kafka leaves them out. The
records are independent, so the result is not atomic: the driver may split a large one into
several batches, any prefix of which is a consistent state.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from quorum.controller.requests import (
    ElectionResult,
    ElectionType,
    ElectLeadersRequest,
    ElectLeadersResponse,
)
from quorum.controller.result import ControllerResult
from quorum.errors import ErrorCode
from quorum.ids import Uuid
from quorum.limits import INT32_MAX
from quorum.metadata.image import NO_LEADER, MetadataImage, PartitionImage
from quorum.metadata.records import PartitionChangeRecord

__all__ = ["ELECT_LEADERS_PARTITIONS_MAX", "elect_leaders", "preferred_imbalance"]

# Partitions one request may name (our bound, like the other admin requests': 10,000 is the
# records of one batch). "All partitions" is not bounded by it.
ELECT_LEADERS_PARTITIONS_MAX: Final = 10_000


def elect_leaders(
    image: MetadataImage, request: ElectLeadersRequest
) -> ControllerResult[ElectLeadersResponse]:
    """Possible codes: top level NONE, INVALID_REQUEST; per partition NONE,
    UNKNOWN_TOPIC_OR_PARTITION, ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE,
    ELIGIBLE_LEADERS_NOT_AVAILABLE."""
    if request.partitions is not None and len(request.partitions) > ELECT_LEADERS_PARTITIONS_MAX:
        return ControllerResult(
            (),
            ElectLeadersResponse(
                error_code=ErrorCode.INVALID_REQUEST,
                error_message=f"{len(request.partitions)} partitions in one ElectLeaders "
                f"request; at most {ELECT_LEADERS_PARTITIONS_MAX} are allowed: split it, or "
                "ask for all partitions",
            ),
        )
    records: list[PartitionChangeRecord] = []
    results: list[ElectionResult] = []
    every = request.partitions is None
    for name, index, found in _partitions(image, request):
        if found is None:
            results.append(
                ElectionResult(
                    name,
                    index,
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    _unknown(image, name, index),
                )
            )
            continue
        topic_id, state = found
        code, message, record = _elect(image, request.election_type, topic_id, state, name)
        if every and code is ErrorCode.ELECTION_NOT_NEEDED:
            continue
        if record is not None:
            records.append(record)
        leader = state.leader if record is None or record.leader is None else record.leader
        results.append(ElectionResult(name, index, code, message, leader))
    return ControllerResult(
        tuple(records), ElectLeadersResponse(results=tuple(results)), is_atomic=False
    )


def preferred_imbalance(image: MetadataImage) -> tuple[tuple[str, int], ...]:
    """The partitions a preferred election would change now: the first replica is in the ISR,
    unfenced, and does not lead (what ``auto.leader.rebalance.enable`` elects)."""
    return tuple(
        (topic.name, state.partition)
        for topic in sorted(image.topics_by_id.values(), key=lambda t: t.name)
        for state in sorted(topic.partitions.values())
        if state.replicas
        and state.leader != state.replicas[0]
        and state.replicas[0] in state.isr
        and _available(image, state.replicas[0])
    )


def _partitions(
    image: MetadataImage, request: ElectLeadersRequest
) -> Iterator[tuple[str, int, tuple[Uuid, PartitionImage] | None]]:
    """(topic name, partition, (topic id, state) or None if it does not exist), each once."""
    if request.partitions is None:
        for topic in sorted(image.topics_by_id.values(), key=lambda t: t.name):
            for state in sorted(topic.partitions.values()):
                yield topic.name, state.partition, (topic.topic_id, state)
        return
    for name, index in dict.fromkeys(request.partitions):
        found = image.topic_by_name(name)
        part = None if found is None else found.partitions.get(index)
        if found is None or part is None:
            yield name, index, None
        else:
            yield name, index, (found.topic_id, part)


def _elect(
    image: MetadataImage,
    election_type: ElectionType,
    topic_id: Uuid,
    state: PartitionImage,
    name: str,
) -> tuple[ErrorCode, str | None, PartitionChangeRecord | None]:
    partition = f"{name}-{state.partition}"
    if election_type is ElectionType.PREFERRED:
        preferred = state.replicas[0]
        if state.leader == preferred:
            return (
                ErrorCode.ELECTION_NOT_NEEDED,
                f"the preferred replica {preferred} already leads {partition}",
                None,
            )
        if preferred not in state.isr or not _available(image, preferred):
            why = "is not in the ISR" if preferred not in state.isr else "is fenced"
            return (
                ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                f"the preferred replica {preferred} of {partition} {why} (ISR "
                f"{list(state.isr)}): it can lead once it is unfenced and in the ISR",
                None,
            )
        return ErrorCode.NONE, None, _change(topic_id, state, preferred, state.isr)
    assert election_type is ElectionType.UNCLEAN, election_type
    if state.leader != NO_LEADER:
        return (
            ErrorCode.ELECTION_NOT_NEEDED,
            f"{partition} has a leader ({state.leader}): an unclean election is only for a "
            "partition without one",
            None,
        )
    for replica in state.replicas:
        if replica in state.isr and _available(image, replica):
            return ErrorCode.NONE, None, _change(topic_id, state, replica, state.isr)
    for replica in state.replicas:
        if _available(image, replica):
            return ErrorCode.NONE, None, _change(topic_id, state, replica, (replica,))
    return (
        ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
        f"no replica of {partition} ({list(state.replicas)}) is registered and unfenced: "
        "start one of its brokers, then elect again",
        None,
    )


def _available(image: MetadataImage, broker_id: int) -> bool:
    broker = image.brokers.get(broker_id)
    return broker is not None and not broker.fenced


def _change(
    topic_id: Uuid, state: PartitionImage, leader: int, isr: tuple[int, ...]
) -> PartitionChangeRecord:
    assert leader != state.leader, (leader, state)
    assert state.leader_epoch < INT32_MAX, state
    assert state.partition_epoch < INT32_MAX, state
    return PartitionChangeRecord(
        topic_id=topic_id,
        partition=state.partition,
        isr=None if isr == state.isr else isr,
        leader=leader,
        leader_epoch=state.leader_epoch + 1,
        partition_epoch=state.partition_epoch + 1,
    )


def _unknown(image: MetadataImage, name: str, index: int) -> str:
    topic = image.topic_by_name(name)
    if topic is None:
        return f"no topic is named {name!r}"
    return (
        f"topic {name!r} has no partition {index}: it has partitions 0 to "
        f"{len(topic.partitions) - 1}"
    )
