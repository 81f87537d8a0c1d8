"""The AlterPartition and ElectLeaders messages as the controller's requests
(quorum/wire/admin.py): ids as 16 bytes, an unknown election type or both ways of naming
partitions refused (the service answers INVALID_REQUEST), results back on the wire."""

from __future__ import annotations

import pytest

from quorum.controller.requests import (
    AlterPartitionItem,
    AlterPartitionResponse,
    AlterPartitionResult,
    AlterPartitionTopicResult,
    ElectionResult,
    ElectionType,
    ElectLeadersResponse,
)
from quorum.errors import ErrorCode
from quorum.ids import Uuid
from quorum.rpc.v1 import admin_pb2
from quorum.wire.admin import (
    add_alter_partition_results,
    add_election_results,
    alter_partition_from_proto,
    elect_leaders_from_proto,
)


def test_alter_partition_round_trip() -> None:
    topic_id = Uuid.random()
    request = alter_partition_from_proto(
        admin_pb2.AlterPartitionRequest(
            broker_id=3,
            broker_epoch=42,
            topics=[
                admin_pb2.AlterPartitionTopicData(
                    topic_id=topic_id.bytes,
                    partitions=[
                        admin_pb2.AlterPartitionPartitionData(
                            partition_index=1, leader_epoch=2, new_isr=[3, 4], partition_epoch=5
                        )
                    ],
                )
            ],
        )
    )
    assert (request.broker_id, request.broker_epoch) == (3, 42)
    (topic,) = request.topics
    assert topic.topic_id == topic_id
    assert topic.partitions == (AlterPartitionItem(1, 2, (3, 4), 5),)
    response = admin_pb2.AlterPartitionResponse()
    add_alter_partition_results(
        response,
        AlterPartitionResponse(
            topics=(
                AlterPartitionTopicResult(
                    topic_id,
                    (AlterPartitionResult(1, ErrorCode.INELIGIBLE_REPLICA, "no", 3, 2, (3,), 5),),
                ),
            )
        ),
    )
    (result,) = response.topics[0].partitions
    assert response.topics[0].topic_id == topic_id.bytes
    assert (result.error_code, result.error_message, list(result.isr)) == (107, "no", [3])
    assert (result.leader_id, result.leader_epoch, result.partition_epoch) == (3, 2, 5)


def test_a_topic_id_of_another_length_is_refused() -> None:
    with pytest.raises(ValueError, match="topic_id must be 16 bytes, got 3"):
        alter_partition_from_proto(
            admin_pb2.AlterPartitionRequest(
                topics=[admin_pb2.AlterPartitionTopicData(topic_id=b"abc")]
            )
        )


def test_elect_leaders_requests() -> None:
    every = elect_leaders_from_proto(
        admin_pb2.ElectLeadersRequest(election_type=1, all_partitions=True)
    )
    assert (every.election_type, every.partitions) == (ElectionType.UNCLEAN, None)
    some = elect_leaders_from_proto(
        admin_pb2.ElectLeadersRequest(
            partitions=[admin_pb2.ElectLeadersPartition(topic="orders", partition=2)]
        )
    )
    assert (some.election_type, some.partitions) == (ElectionType.PREFERRED, (("orders", 2),))
    with pytest.raises(ValueError, match="is not one of 0 \\(PREFERRED\\), 1 \\(UNCLEAN\\)"):
        elect_leaders_from_proto(admin_pb2.ElectLeadersRequest(election_type=2))
    with pytest.raises(ValueError, match="give one or the other"):
        elect_leaders_from_proto(
            admin_pb2.ElectLeadersRequest(
                all_partitions=True,
                partitions=[admin_pb2.ElectLeadersPartition(topic="orders", partition=0)],
            )
        )
    response = admin_pb2.ElectLeadersResponse()
    add_election_results(
        response,
        ElectLeadersResponse(results=(ElectionResult("orders", 2, ErrorCode.NONE, None, 7),)),
    )
    (result,) = response.results
    assert (result.topic, result.partition, result.error_code, result.leader) == ("orders", 2, 0, 7)
