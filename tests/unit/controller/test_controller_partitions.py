"""The controller's CreatePartitions (quorum/controller/partitions.py): growth with placement,
one atomic batch, every refusal with Kafka's code and no state change, validate_only, by id."""

from __future__ import annotations

from collections import Counter

import pytest

from quorum.controller.requests import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsResult,
    CreatePartitionsTopic,
)
from quorum.controller.result import ControllerResult
from quorum.errors import ErrorCode
from quorum.ids import ZERO_UUID, Uuid
from quorum.limits import CREATE_PARTITIONS_TOPICS_MAX, RECORDS_PER_BATCH_MAX
from quorum.metadata.records import PartitionRecord
from tests.unit.controller.test_controller_topics import Harness


@pytest.fixture
def h() -> Harness:
    return Harness()


def grow_result(
    h: Harness, *topics: CreatePartitionsTopic, validate_only: bool = False
) -> ControllerResult[CreatePartitionsResponse]:
    return h.sm.create_partitions(
        CreatePartitionsRequest(tuple(topics), validate_only=validate_only),
        next_offset=h.next_offset,
    )


def grow(h: Harness, *topics: CreatePartitionsTopic) -> CreatePartitionsResponse:
    return h.propose(grow_result(h, *topics))


def refused(h: Harness, *topics: CreatePartitionsTopic) -> CreatePartitionsResult:
    (result,) = h.expect_refused(lambda: grow_result(h, *topics)).results
    assert result.error_code != ErrorCode.NONE
    assert result.error_message
    return result


def test_grow_by_name_places_new_partitions_and_keeps_the_old_ones(h: Harness) -> None:
    created = h.create_one("orders", 2, 2)
    before = dict(h.sm.committed_image.topics_by_id[created.topic_id].partitions)
    result = h.sm.create_partitions(
        CreatePartitionsRequest((CreatePartitionsTopic("orders", 5),)), next_offset=h.next_offset
    )
    assert result.is_atomic
    assert [type(r) for r in result.records] == [PartitionRecord] * 3
    response = h.propose(result)
    assert response.results == (CreatePartitionsResult("orders", created.topic_id),)
    partitions = h.sm.committed_image.topics_by_id[created.topic_id].partitions
    assert sorted(partitions) == [0, 1, 2, 3, 4]
    for index, state in before.items():
        assert partitions[index] == state
    new = [partitions[i] for i in (2, 3, 4)]
    assert all(len(p.replicas) == 2 and len(set(p.replicas)) == 2 for p in new)
    assert all(p.isr == p.replicas and p.leader == p.replicas[0] for p in new)
    assert all(p.leader_epoch == 0 and p.partition_epoch == 0 for p in new)
    # Round-robin from a random start: three new leaders on three different brokers.
    assert len({p.leader for p in new}) == 3
    h.check_replay()


def test_grow_by_id_and_several_topics_in_one_batch(h: Harness) -> None:
    a = h.create_one("a", 1, 1)
    b = h.create_one("b", 1, 3)
    result = grow_result(
        h, CreatePartitionsTopic(topic_id=a.topic_id, count=3), CreatePartitionsTopic("b", 2)
    )
    assert [(r.topic_id, r.partition) for r in result.records] == [
        (a.topic_id, 1),
        (a.topic_id, 2),
        (b.topic_id, 1),
    ]
    response = h.propose(result)
    assert response.results == (
        CreatePartitionsResult("a", a.topic_id),
        CreatePartitionsResult("b", b.topic_id),
    )
    assert len(h.sm.committed_image.topics_by_id[b.topic_id].partitions[1].replicas) == 3
    h.check_replay()


def test_manual_assignments_with_a_fenced_broker(h: Harness) -> None:
    created = h.create_one("t", 1, 2)
    h.add_broker(3, unfence=False)
    grow(h, CreatePartitionsTopic("t", 3, assignments=((3, 1), (2, 0))))
    partitions = h.sm.committed_image.topics_by_id[created.topic_id].partitions
    assert (partitions[1].replicas, partitions[1].isr, partitions[1].leader) == ((3, 1), (1,), 1)
    assert (partitions[2].replicas, partitions[2].isr, partitions[2].leader) == ((2, 0), (2, 0), 2)


def test_validate_only_writes_nothing(h: Harness) -> None:
    created = h.create_one("t", 1, 1)
    response = h.expect_refused(
        lambda: grow_result(h, CreatePartitionsTopic("t", 4), validate_only=True)
    )
    assert response.results == (CreatePartitionsResult("t", created.topic_id),)
    (refusal,) = h.expect_refused(
        lambda: grow_result(h, CreatePartitionsTopic("t", 1), validate_only=True)
    ).results
    assert refusal.error_code == ErrorCode.INVALID_PARTITIONS


@pytest.mark.parametrize(
    ("count", "text"),
    [
        (2, "already has 2 partition(s)"),
        (1, "currently has 2 partition(s); 1 would not be an increase"),
        (0, "0 would not be an increase"),
        (-1, "-1 would not be an increase"),
        (5_001, "more than the 5000 a topic may have"),
    ],
)
def test_counts_that_do_not_grow_are_invalid_partitions(h: Harness, count: int, text: str) -> None:
    h.create_one("t", 2, 1)
    result = refused(h, CreatePartitionsTopic("t", count))
    assert result.error_code == ErrorCode.INVALID_PARTITIONS
    assert text in (result.error_message or "")


@pytest.mark.parametrize(
    ("assignments", "text"),
    [
        ((), "add 2 additional partition(s) to 't', but 0 assignment(s)"),
        (((0, 1),), "but 1 assignment(s)"),
        (((0, 1), (1, 2), (2, 0)), "but 3 assignment(s)"),
        (((0, 1), ()), "partition 2 is empty"),
        (((0, 1), (2,)), "(2) with 1 replica(s), but this is not consistent"),
        (((0, 1), (1, 1)), "includes broker 1 more than once"),
        (((0, 1), (1, 9)), "includes broker 9, but no such broker is registered"),
    ],
)
def test_bad_assignments_are_invalid_replica_assignment(
    h: Harness, assignments: tuple[tuple[int, ...], ...], text: str
) -> None:
    h.create_one("t", 1, 2)
    result = refused(h, CreatePartitionsTopic("t", 3, assignments=assignments))
    assert result.error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert text in (result.error_message or "")


def test_an_assignment_of_only_fenced_brokers() -> None:
    h = Harness()
    h.create_one("t", 1, 1)
    h.add_broker(3, unfence=False)
    result = refused(h, CreatePartitionsTopic("t", 2, assignments=((3,),)))
    assert result.error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert "partition 1 ([3]) are fenced" in (result.error_message or "")


def test_placement_needs_the_topics_replication_factor_in_unfenced_brokers() -> None:
    h = Harness(racks=(None, None, None))
    created = h.create_one("t", 1, 3)
    # Broker 2 stops heartbeating and is fenced; brokers 0 and 1 stay.
    h.now_ms += 60_000
    h.heartbeat(0)
    h.heartbeat(1)
    h.propose(h.sm.fence_stale_brokers(now_ms=h.now_ms, next_offset=h.next_offset))
    assert h.sm.committed_image.brokers[2].fenced
    result = refused(h, CreatePartitionsTopic("t", 2))
    assert result.error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert "3 time(s) (its replication factor)" in (result.error_message or "")
    assert "2 unfenced broker(s) of 3 registered; fenced: [2]" in (result.error_message or "")
    # With an assignment naming the fenced broker too, the topic grows (ISR: the others).
    grow(h, CreatePartitionsTopic("t", 2, assignments=((2, 0, 1),)))
    partition = h.sm.committed_image.topics_by_id[created.topic_id].partitions[1]
    assert (partition.replicas, partition.isr, partition.leader) == ((2, 0, 1), (0, 1), 0)


def test_unknown_topics_and_the_metadata_topic(h: Harness) -> None:
    created = h.create_one("t", 1, 1)
    result = refused(h, CreatePartitionsTopic("nope", 2))
    assert (result.error_code, result.name) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "nope")
    stranger = Uuid.random(h.rng)
    result = refused(h, CreatePartitionsTopic(topic_id=stranger, count=2))
    assert (result.error_code, result.topic_id) == (ErrorCode.UNKNOWN_TOPIC_ID, stranger)
    meta = h.sm.metadata_topic_record(h.new_id, next_offset=h.next_offset)
    assert meta is not None
    h.propose(meta)
    result = refused(h, CreatePartitionsTopic("__cluster_metadata", 2))
    assert result.error_code == ErrorCode.INVALID_REQUEST
    assert "exactly one partition" in (result.error_message or "")
    assert created.topic_id != ZERO_UUID


def test_request_shape_errors(h: Harness) -> None:
    created = h.create_one("t", 1, 1)
    h.create_one("u", 1, 1)
    both = CreatePartitionsTopic("t", 2, topic_id=created.topic_id)
    neither = CreatePartitionsTopic(None, 2)
    response = h.expect_refused(lambda: grow_result(h, both, neither))
    assert [r.error_code for r in response.results] == [ErrorCode.INVALID_REQUEST] * 2
    assert "both topic name and topic id" in (response.results[0].error_message or "")
    assert "Neither" in (response.results[1].error_message or "")
    # The same name twice, the same id twice, one topic by name and by id: every entry refused,
    # the other topics of the request still grow.
    twice = grow(
        h,
        CreatePartitionsTopic("t", 2),
        CreatePartitionsTopic("t", 3),
        CreatePartitionsTopic("u", 2),
    )
    assert [r.error_code for r in twice.results] == [
        ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.NONE,
    ]
    assert "Duplicate topic name" in (twice.results[0].error_message or "")
    by_both = h.expect_refused(
        lambda: grow_result(
            h,
            CreatePartitionsTopic("t", 2),
            CreatePartitionsTopic(topic_id=created.topic_id, count=2),
        )
    )
    assert [r.error_code for r in by_both.results] == [ErrorCode.INVALID_REQUEST] * 2
    assert "named more than once" in (by_both.results[1].error_message or "")


def test_request_limits(h: Harness) -> None:
    h.create_one("t", 1, 1)
    many = tuple(CreatePartitionsTopic(f"t{i}", 2) for i in range(CREATE_PARTITIONS_TOPICS_MAX + 1))
    response = h.expect_refused(lambda: grow_result(h, *many))
    assert Counter(r.error_code for r in response.results) == {
        ErrorCode.INVALID_REQUEST: CREATE_PARTITIONS_TOPICS_MAX + 1
    }
    # Three topics grown by 4,999 partitions each: the third would take the batch past
    # RECORDS_PER_BATCH_MAX records, so it is a policy violation; the first two grow.
    for name in ("u", "v", "w"):
        h.create_one(name, 1, 1)
    assert 2 * 4_999 <= RECORDS_PER_BATCH_MAX < 3 * 4_999
    response = grow(h, *(CreatePartitionsTopic(n, 5_000) for n in ("u", "v", "w")))
    assert [r.error_code for r in response.results] == [
        ErrorCode.NONE,
        ErrorCode.NONE,
        ErrorCode.POLICY_VIOLATION,
    ]
    assert "more than 10000 records in one atomic batch" in (
        response.results[2].error_message or ""
    )
    assert h.sm.committed_image.topic_by_name("w") is not None
    assert len(h.sm.committed_image.topic_by_name("w").partitions) == 1  # type: ignore[union-attr]
