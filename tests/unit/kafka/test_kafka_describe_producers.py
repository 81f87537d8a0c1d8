"""DescribeProducers (API key 61) on the Kafka listener (broker/kafka/producers.py), through the
real listener over real partition logs: the producers a partition's log remembers (id, epoch,
last sequence, last timestamp, coordinator epoch and transaction start -1), and each refusal in
Kafka's order: INVALID_TOPIC_EXCEPTION, TOPIC_AUTHORIZATION_FAILED (no READ),
UNKNOWN_TOPIC_OR_PARTITION (no topic, no partition), NOT_LEADER_OR_FOLLOWER (no replica here)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from quorum.ids import Uuid
from quorum.metadata.delta import replay_records
from quorum.metadata.records import (
    AccessControlEntryRecord,
    PartitionChangeRecord,
    PartitionRecord,
    TopicRecord,
)
from quorum.security.authorization import RequestAuthorization
from tests.unit.kafka.test_kafka_data import STRICT, DataHarness, batch, image

DESCRIBE_PRODUCERS = 61


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[DataHarness]:
    made = DataHarness(tmp_path)
    yield made
    made.close()


def describe(harness: DataHarness, topics: list[tuple[str, list[int]]], **kw: Any) -> Any:
    response = harness.ask(
        DESCRIBE_PRODUCERS,
        0,
        {"topics": [{"name": n, "partition_indexes": p} for n, p in topics]},
        **kw,
    )
    return {(t.name, p.partition_index): p for t in response.topics for p in t.partitions}


def test_the_producers_of_a_partition_with_their_last_batch(harness: DataHarness) -> None:
    first = batch(3, producer_id=7, producer_epoch=2, base_sequence=0, timestamp=1_000)
    second = batch(2, seed=1, producer_id=7, producer_epoch=2, base_sequence=3, timestamp=5_000)
    other = batch(1, seed=2, producer_id=9, producer_epoch=0, base_sequence=0, timestamp=2_000)
    for records in (first, other, second):
        assert int(harness.produce("orders", 0, records).error_code) == 0
    assert int(harness.produce("orders", 0, batch(1, seed=3)).error_code) == 0  # no producer
    found = describe(harness, [("orders", [0, 1])])
    answer = found[("orders", 0)]
    assert int(answer.error_code) == 0 and answer.error_message is None
    producers = {p.producer_id: p for p in answer.active_producers}
    assert set(producers) == {7, 9}
    seven = producers[7]
    assert (seven.producer_epoch, seven.last_sequence, seven.last_timestamp) == (2, 4, 5_001)
    assert (seven.coordinator_epoch, seven.current_txn_start_offset) == (-1, -1)
    assert (producers[9].last_sequence, producers[9].last_timestamp) == (0, 2_000)
    assert int(found[("orders", 1)].error_code) == 0
    assert found[("orders", 1)].active_producers == ()


def test_refusals_per_partition(harness: DataHarness) -> None:
    found = describe(
        harness,
        [("orders", [5]), ("elsewhere", [0]), ("nope", [0]), ("bad name!", [0])],
    )
    assert int(found[("orders", 5)].error_code) == 3  # UNKNOWN_TOPIC_OR_PARTITION
    assert "no partition 5" in found[("orders", 5)].error_message
    assert int(found[("elsewhere", 0)].error_code) == 6  # NOT_LEADER_OR_FOLLOWER
    assert "holds no replica" in found[("elsewhere", 0)].error_message
    assert int(found[("nope", 0)].error_code) == 3
    assert int(found[("bad name!", 0)].error_code) == 17  # INVALID_TOPIC_EXCEPTION


def test_a_replica_whose_log_is_not_here_yet(harness: DataHarness) -> None:
    # A new topic with a replica on broker 1, whose directory reconciliation has not made.
    fresh = Uuid.random()
    records = [TopicRecord("fresh", fresh), PartitionRecord(fresh, 0, (1,), (1,), 1, 0)]
    offset = harness.image.offset
    harness.image = replay_records(
        harness.image, [(offset + 1 + i, r) for i, r in enumerate(records)]
    )
    (answer,) = describe(harness, [("fresh", [0])]).values()
    assert int(answer.error_code) == 6  # NOT_LEADER_OR_FOLLOWER: clients retry
    assert "retry shortly" in answer.error_message


def test_a_follower_answers_from_its_own_log(harness: DataHarness) -> None:
    records = batch(1, producer_id=4, producer_epoch=0, base_sequence=0)
    assert int(harness.produce("strict", 0, records).error_code) == 0
    # Broker 2 becomes the leader of strict-0 (replicas 1, 2): broker 1 is a follower now,
    # and answers from its own log as Kafka's Partition.activeProducerState does.
    moved = PartitionChangeRecord(STRICT, 0, leader=2, leader_epoch=4)
    harness.image = replay_records(harness.image, [(harness.image.offset + 1, moved)])
    assert harness.image.topic_by_name("strict").partitions[0].leader == 2  # type: ignore[union-attr]
    found = describe(harness, [("strict", [0])])
    assert [p.producer_id for p in found[("strict", 0)].active_producers] == [4]


def test_without_read_on_the_topic(tmp_path: Path) -> None:
    harness = DataHarness(
        tmp_path, authorization=RequestAuthorization(enabled=True, cluster_id="c")
    )
    # READ (3) on topic (2) "orders" (LITERAL, 3) for User:reader, ALLOW (3).
    acl = AccessControlEntryRecord(Uuid.random(), 2, "orders", 3, "User:reader", "*", 3, 3)
    harness.image = image([acl])
    try:
        denied = describe(harness, [("orders", [0]), ("nope", [0])], principal="User:other")
        assert int(denied[("orders", 0)].error_code) == 29
        assert "needs READ on the topic" in denied[("orders", 0)].error_message
        assert int(denied[("nope", 0)].error_code) == 29  # before "unknown": no existence leak
        allowed = describe(harness, [("orders", [0])], principal="User:reader")
        assert int(allowed[("orders", 0)].error_code) == 0
    finally:
        harness.close()
