"""DescribeQuorum on the Kafka listener (broker/kafka/quorum_api.py): the controllers' gRPC
answer translated into Kafka's response at every version, the cluster ACL, the one partition a
request may name, and a controller that cannot be reached. The listener is the real one; the
controllers behind it are a function returning what a controller's QuorumService answers."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import structlog

from broker.kafka.apis import KafkaApis
from broker.kafka.quorum_api import QuorumUnreachableError, nodes_of
from broker.kafka.server import KafkaListenerServer
from quorum.errors import ErrorCode
from quorum.rpc.v1 import raft_pb2
from quorum.security.authorization import RequestAuthorization
from quorum.security.identity import CallerResolver
from tests.unit.kafka.test_kafka_protocol import LISTENER, Harness, image_with_topics

DESCRIBE_QUORUM = 55
DIRECTORY = uuid.UUID("6d1b0a9c-3f55-4c1e-9d5a-2a6b1d0c7e11")


def controllers_answer() -> raft_pb2.DescribeQuorumResponse:
    def voter(node: int, end: int) -> raft_pb2.ReplicaState:
        return raft_pb2.ReplicaState(
            replica_id=node,
            log_end_offset=end,
            last_fetch_timestamp_ms=1_700_000_000_000 + node,
            last_caught_up_timestamp_ms=1_700_000_000_100 + node,
            endpoints=[f"CONTROLLER://127.0.0.1:{19090 + node}"],
            directory_id=DIRECTORY.bytes if node == 1 else b"",
        )

    return raft_pb2.DescribeQuorumResponse(
        cluster_id="MkU3OEVBNTcwNTJENDM2Qg",
        leader_id=2,
        leader_epoch=7,
        high_watermark=120,
        current_voters=[voter(1, 120), voter(2, 121), voter(3, 90)],
        observers=[raft_pb2.ReplicaState(replica_id=101, log_end_offset=120)],
    )


class QuorumHarness(Harness):
    def __init__(self, describe: Any, authorization: RequestAuthorization | None = None) -> None:
        super().__init__(image_with_topics(), authorization=authorization)
        self.forwarded: list[raft_pb2.DescribeQuorumRequest] = []

        async def recording(request: raft_pb2.DescribeQuorumRequest) -> Any:
            self.forwarded.append(request)
            return await describe(request)

        self.apis = KafkaApis(
            broker_id=1,
            cluster_id="MkU3OEVBNTcwNTJENDM2Qg",
            image=lambda: self.image,
            authorization=authorization or RequestAuthorization.disabled(),
            forwarder=self.controller,
            wait_applied=self._wait_applied,
            describe_quorum=recording,
        )
        self.server = KafkaListenerServer(
            LISTENER, self.apis, CallerResolver(), tls=None, logger=structlog.get_logger()
        )


def metadata_partition(name: str = "__cluster_metadata", index: int = 0) -> dict[str, Any]:
    return {"topics": [{"topic_name": name, "partitions": [{"partition_index": index}]}]}


async def answer(request: raft_pb2.DescribeQuorumRequest) -> raft_pb2.DescribeQuorumResponse:
    return controllers_answer()


@pytest.mark.parametrize("version", [0, 1, 2])
def test_the_controllers_answer_is_kafkas_response(version: int) -> None:
    harness = QuorumHarness(answer)
    response = harness.ask(DESCRIBE_QUORUM, version, metadata_partition())
    assert int(response.error_code) == ErrorCode.NONE
    assert [request.partition_index for request in harness.forwarded] == [0]
    (topic,) = response.topics
    assert topic.topic_name == "__cluster_metadata"
    (partition,) = topic.partitions
    assert int(partition.error_code) == ErrorCode.NONE
    assert (partition.leader_id, partition.leader_epoch, partition.high_watermark) == (2, 7, 120)
    voters = {v.replica_id: v for v in partition.current_voters}
    assert sorted(voters) == [1, 2, 3]
    assert voters[3].log_end_offset == 90
    assert [o.replica_id for o in partition.observers] == [101]
    if version >= 1:
        assert voters[1].last_fetch_timestamp == 1_700_000_000_001
        assert voters[1].last_caught_up_timestamp == 1_700_000_000_101
    if version >= 2:
        assert voters[1].replica_directory_id == DIRECTORY
        assert voters[2].replica_directory_id is None
        nodes = {n.node_id: [(x.name, x.host, x.port) for x in n.listeners] for n in response.nodes}
        assert nodes == {n: [("CONTROLLER", "127.0.0.1", 19090 + n)] for n in (1, 2, 3)}


@pytest.mark.parametrize(
    ("name", "index"), [("__cluster_metadata", 1), ("orders", 0), ("__consumer_offsets", 0)]
)
def test_only_the_metadata_partition_is_described(name: str, index: int) -> None:
    harness = QuorumHarness(answer)
    response = harness.ask(DESCRIBE_QUORUM, 2, metadata_partition(name, index))
    assert int(response.error_code) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert "__cluster_metadata-0" in response.error_message
    assert harness.forwarded == []


def test_describing_the_quorum_needs_describe_on_the_cluster() -> None:
    harness = QuorumHarness(
        answer, authorization=RequestAuthorization(enabled=True, cluster_id="c")
    )
    response = harness.ask(DESCRIBE_QUORUM, 2, metadata_partition())
    assert int(response.error_code) == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert "DESCRIBE the cluster" in response.error_message
    assert harness.forwarded == []


def test_no_controller_answering_is_retriable() -> None:
    async def unreachable(request: raft_pb2.DescribeQuorumRequest) -> Any:
        raise QuorumUnreachableError("127.0.0.1:19091: UNAVAILABLE")

    response = QuorumHarness(unreachable).ask(DESCRIBE_QUORUM, 2, metadata_partition())
    assert int(response.error_code) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert "UNAVAILABLE" in response.error_message


def test_endpoints_that_do_not_parse_are_left_out() -> None:
    voter = raft_pb2.ReplicaState(
        replica_id=1,
        endpoints=[
            "CONTROLLER://127.0.0.1:19091",
            "no-scheme:1",
            "X://host:port",
            "X://host:70000",
            "X://[::1]:9093",
        ],
    )
    assert nodes_of([voter]) == [
        {
            "node_id": 1,
            "listeners": [
                {"name": "CONTROLLER", "host": "127.0.0.1", "port": 19091},
                {"name": "X", "host": "::1", "port": 9093},
            ],
        }
    ]
