"""AlterPartition (Kafka's ``ReplicationControlManager.alterPartition``): only the partition's
leader, at its broker epoch and the partition's leader and partition epochs, changes an ISR to
a legal one; each refusal, in Kafka's order, changes nothing and answers the current state;
a success writes one PartitionChangeRecord (new ISR, partition epoch + 1)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from quorum.controller.alter_partition import ALTER_PARTITION_PARTITIONS_MAX, alter_partition
from quorum.controller.requests import (
    AlterPartitionItem,
    AlterPartitionRequest,
    AlterPartitionResponse,
    AlterPartitionResult,
    AlterPartitionTopic,
    BrokerHeartbeatRequest,
    CreatableReplicaAssignment,
    CreatableTopic,
)
from quorum.errors import ErrorCode
from quorum.ids import Uuid
from quorum.metadata.image import MetadataImage, PartitionImage
from quorum.metadata.records import PartitionChangeRecord
from tests.unit.controller.test_controller_topics import Harness


def cluster() -> tuple[Harness, Uuid]:
    """Brokers 0, 1, 2, 3 (3 fenced); topic t: partition 0 on (0, 1, 2) led by 0, partition 1
    on (1, 2, 0) led by 1."""
    h = Harness(racks=(None, None, None))
    h.add_broker(3, unfence=False)
    layout = ((0, 1, 2), (1, 2, 0))
    assignments = tuple(CreatableReplicaAssignment(i, r) for i, r in enumerate(layout))
    result = h.create(CreatableTopic("t", assignments=assignments)).topics[0]
    assert result.error_code is ErrorCode.NONE, result.error_message
    return h, result.topic_id


def state(h: Harness, topic_id: Uuid, partition: int = 0) -> PartitionImage:
    topic = h.sm.latest_image.topic(topic_id)
    assert topic is not None
    return topic.partitions[partition]


def item(
    h: Harness, topic_id: Uuid, new_isr: tuple[int, ...], partition: int = 0, **kw: int
) -> AlterPartitionItem:
    current = state(h, topic_id, partition)
    return AlterPartitionItem(
        partition_index=partition,
        leader_epoch=kw.get("leader_epoch", current.leader_epoch),
        new_isr=new_isr,
        partition_epoch=kw.get("partition_epoch", current.partition_epoch),
    )


def request(
    h: Harness, broker_id: int, *topics: AlterPartitionTopic, epoch: int | None = None
) -> AlterPartitionRequest:
    broker_epoch = h.sm.latest_image.brokers[broker_id].broker_epoch if epoch is None else epoch
    return AlterPartitionRequest(broker_id, broker_epoch, topics)


def alter(h: Harness, req: AlterPartitionRequest) -> AlterPartitionResponse:
    return h.propose(h.sm.alter_partition(req, next_offset=h.next_offset))


def only(response: AlterPartitionResponse) -> AlterPartitionResult:
    assert response.error_code is ErrorCode.NONE, response.error_message
    ((result,),) = [t.partitions for t in response.topics]
    return result


def test_the_leader_shrinks_and_grows_the_isr() -> None:
    h, topic_id = cluster()
    before = state(h, topic_id)
    assert (before.leader, before.isr) == (0, (0, 1, 2))
    result = h.sm.alter_partition(
        request(h, 0, AlterPartitionTopic(topic_id, (item(h, topic_id, (2, 0)),))),
        next_offset=h.next_offset,
    )
    # One record: the ISR in replica order, the next partition epoch, nothing else.
    assert result.records == (
        PartitionChangeRecord(topic_id, 0, isr=(0, 2), partition_epoch=before.partition_epoch + 1),
    )
    answer = only(h.propose(result))
    after = state(h, topic_id)
    assert after == before._replace(isr=(0, 2), partition_epoch=before.partition_epoch + 1)
    assert (answer.leader_id, answer.leader_epoch, answer.isr, answer.partition_epoch) == (
        0,
        before.leader_epoch,
        (0, 2),
        before.partition_epoch + 1,
    )
    # Broker 1 caught up again: the leader adds it back at the new partition epoch.
    grown = only(
        alter(h, request(h, 0, AlterPartitionTopic(topic_id, (item(h, topic_id, (0, 1, 2)),))))
    )
    assert grown.error_code is ErrorCode.NONE
    assert state(h, topic_id).isr == (0, 1, 2)
    assert state(h, topic_id).partition_epoch == before.partition_epoch + 2
    h.check_replay()


def test_the_same_isr_answers_the_current_state_without_a_record() -> None:
    h, topic_id = cluster()
    current = state(h, topic_id)
    result = h.sm.alter_partition(
        request(h, 0, AlterPartitionTopic(topic_id, (item(h, topic_id, (2, 1, 0)),))),
        next_offset=h.next_offset,
    )
    assert result.records == ()
    answer = only(result.response)
    assert answer.error_code is ErrorCode.NONE
    assert (answer.isr, answer.partition_epoch) == (current.isr, current.partition_epoch)


def test_a_stale_or_unknown_broker_epoch_refuses_the_whole_request() -> None:
    h, topic_id = cluster()
    epoch = h.sm.latest_image.brokers[0].broker_epoch
    for req, text in (
        (request(h, 0, AlterPartitionTopic(topic_id, ()), epoch=epoch + 1), "register again"),
        (AlterPartitionRequest(9, 0, (AlterPartitionTopic(topic_id, ()),)), "not registered"),
    ):
        response = h.expect_refused(
            lambda r=req: h.sm.alter_partition(r, next_offset=h.next_offset)
        )
        assert response.error_code is ErrorCode.STALE_BROKER_EPOCH
        assert text in (response.error_message or "")
        assert response.topics == ()


def test_unknown_topic_id_and_unknown_partition() -> None:
    h, topic_id = cluster()
    missing = Uuid.random(h.rng)
    req = request(
        h,
        0,
        AlterPartitionTopic(missing, (AlterPartitionItem(0, 0, (0,), 0),)),
        AlterPartitionTopic(topic_id, (AlterPartitionItem(7, 0, (0,), 0),)),
    )
    response = h.expect_refused(lambda: h.sm.alter_partition(req, next_offset=h.next_offset))
    first, second = (t.partitions[0] for t in response.topics)
    assert first.error_code is ErrorCode.UNKNOWN_TOPIC_ID
    assert str(missing) in (first.error_message or "")
    assert second.error_code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert "partitions 0 to 1" in (second.error_message or "")
    assert (second.leader_id, second.isr, second.partition_epoch) == (-1, (), -1)


# (sender, change to the item, expected code, text in the message); checked in Kafka's order,
# so each row is wrong in its own way and right in every earlier one.
REFUSALS: list[tuple[str, int, tuple[int, ...], dict[str, int], ErrorCode, str]] = [
    ("follower", 1, (0, 1), {}, ErrorCode.NOT_LEADER_OR_FOLLOWER, "does not lead"),
    ("older leader epoch", 0, (0, 1), {"leader_epoch": -1}, ErrorCode.FENCED_LEADER_EPOCH, "older"),
    ("newer leader epoch", 0, (0, 1), {"leader_epoch": 1}, ErrorCode.FENCED_LEADER_EPOCH, "newer"),
    (
        "partition epoch",
        0,
        (0, 1),
        {"partition_epoch": 1},
        ErrorCode.INVALID_UPDATE_VERSION,
        "ask again at its partition epoch",
    ),
    ("empty", 0, (), {}, ErrorCode.INVALID_REQUEST, "is empty"),
    ("duplicate", 0, (0, 1, 1), {}, ErrorCode.INVALID_REQUEST, "names a broker twice"),
    ("non-replica", 0, (0, 3), {}, ErrorCode.INVALID_REQUEST, "names [3], not replicas"),
    ("no leader", 0, (1, 2), {}, ErrorCode.INVALID_REQUEST, "leaves out the leader 0"),
]


@pytest.mark.parametrize(
    ("sender", "new_isr", "shift", "code", "text"),
    [row[1:] for row in REFUSALS],
    ids=[row[0] for row in REFUSALS],
)
def test_refusals_change_nothing_and_answer_the_current_state(
    sender: int, new_isr: tuple[int, ...], shift: dict[str, int], code: ErrorCode, text: str
) -> None:
    h, topic_id = cluster()
    current = state(h, topic_id)
    fields = {k: getattr(current, k) + v for k, v in shift.items()}
    req = request(h, sender, AlterPartitionTopic(topic_id, (item(h, topic_id, new_isr, **fields),)))
    response = h.expect_refused(lambda: h.sm.alter_partition(req, next_offset=h.next_offset))
    answer = only(response)
    assert answer.error_code is code
    assert text in (answer.error_message or ""), answer.error_message
    assert (answer.leader_id, answer.leader_epoch, answer.isr, answer.partition_epoch) == (
        current.leader,
        current.leader_epoch,
        current.isr,
        current.partition_epoch,
    )


def shrink_to_leader(h: Harness, topic_id: Uuid, partition: int = 0) -> None:
    leader = state(h, topic_id, partition).leader
    req = request(
        h, leader, AlterPartitionTopic(topic_id, (item(h, topic_id, (leader,), partition),))
    )
    assert only(alter(h, req)).error_code is ErrorCode.NONE


def test_adding_a_fenced_broker_is_ineligible() -> None:
    h, topic_id = cluster()
    shrink_to_leader(h, topic_id)
    # Broker 2 shuts down (controlled shutdown fences it at once).
    epoch = h.sm.latest_image.brokers[2].broker_epoch
    h.propose(
        h.sm.broker_heartbeat(
            BrokerHeartbeatRequest(2, epoch, h.next_offset, want_shut_down=True),
            next_offset=h.next_offset,
            now_ms=h.now_ms,
        )
    )
    assert h.sm.latest_image.brokers[2].fenced
    req = request(h, 0, AlterPartitionTopic(topic_id, (item(h, topic_id, (0, 1, 2)),)))
    response = h.expect_refused(lambda: h.sm.alter_partition(req, next_offset=h.next_offset))
    answer = only(response)
    assert answer.error_code is ErrorCode.INELIGIBLE_REPLICA
    assert "2 (fenced or in controlled shutdown)" in (answer.error_message or "")
    # Adding only the live broker 1 is fine.
    grown = only(
        alter(h, request(h, 0, AlterPartitionTopic(topic_id, (item(h, topic_id, (0, 1)),))))
    )
    assert grown.isr == (0, 1)
    h.check_replay()


def with_brokers(image: MetadataImage, **changes: Any) -> MetadataImage:
    """``image`` with broker entries replaced: ``b1=None`` drops broker 1, ``b1=True`` fences
    it (without the partition changes fencing would write: the states a leader may still act
    on before it sees them)."""
    brokers = dict(image.brokers)
    for name, change in changes.items():
        broker_id = int(name[1:])
        if change is None:
            del brokers[broker_id]
        else:
            brokers[broker_id] = dataclasses.replace(brokers[broker_id], fenced=change)
    return dataclasses.replace(image, brokers=brokers)


def test_keeping_or_removing_a_fenced_member_is_allowed() -> None:
    h, topic_id = cluster()
    image = with_brokers(h.sm.latest_image, b1=True)
    current = state(h, topic_id)
    epoch = image.brokers[0].broker_epoch

    def ask(new_isr: tuple[int, ...]) -> tuple[int, AlterPartitionResult]:
        result = alter_partition(
            image,
            AlterPartitionRequest(
                0,
                epoch,
                (AlterPartitionTopic(topic_id, (item(h, topic_id, new_isr),)),),
            ),
        )
        return len(result.records), only(result.response)

    records, removed = ask((0, 2))
    assert (records, removed.error_code, removed.isr) == (1, ErrorCode.NONE, (0, 2))
    records, kept = ask((0, 1, 2))
    assert (records, kept.error_code, kept.isr) == (0, ErrorCode.NONE, current.isr)


def test_adding_an_unregistered_broker_is_ineligible() -> None:
    h, topic_id = cluster()
    shrink_to_leader(h, topic_id)
    image = with_brokers(h.sm.latest_image, b1=None)
    result = alter_partition(
        image,
        AlterPartitionRequest(
            0,
            image.brokers[0].broker_epoch,
            (AlterPartitionTopic(topic_id, (item(h, topic_id, (0, 1)),)),),
        ),
    )
    answer = only(result.response)
    assert result.records == ()
    assert answer.error_code is ErrorCode.INELIGIBLE_REPLICA
    assert "1 (not registered)" in (answer.error_message or "")


def test_a_partition_named_twice_is_refused_the_second_time() -> None:
    h, topic_id = cluster()
    first = item(h, topic_id, (0, 1))
    req = request(h, 0, AlterPartitionTopic(topic_id, (first, first)))
    result = h.sm.alter_partition(req, next_offset=h.next_offset)
    assert len(result.records) == 1
    one, two = result.response.topics[0].partitions
    assert one.error_code is ErrorCode.NONE
    assert two.error_code is ErrorCode.INVALID_REQUEST
    assert "more than once" in (two.error_message or "")


def test_a_second_change_in_flight_is_checked_against_the_first() -> None:
    """The controller validates against its latest image: a retry of a change already
    proposed (not yet committed) carries the old partition epoch and is refused."""
    h, topic_id = cluster()
    req = request(h, 0, AlterPartitionTopic(topic_id, (item(h, topic_id, (0, 1)),)))
    h.propose(h.sm.alter_partition(req, next_offset=h.next_offset), hold=True)
    again = h.sm.alter_partition(req, next_offset=h.next_offset)
    assert again.records == ()
    assert only(again.response).error_code is ErrorCode.INVALID_UPDATE_VERSION
    h.commit_held()
    h.check_replay()


def test_too_many_partitions_is_a_request_level_error() -> None:
    h, topic_id = cluster()
    items = tuple(
        AlterPartitionItem(0, 0, (0,), 0) for _ in range(ALTER_PARTITION_PARTITIONS_MAX + 1)
    )
    response = h.expect_refused(
        lambda: h.sm.alter_partition(
            request(h, 0, AlterPartitionTopic(topic_id, items)), next_offset=h.next_offset
        )
    )
    assert response.error_code is ErrorCode.INVALID_REQUEST
    assert "split it" in (response.error_message or "")
