"""DescribeQuorum (API key 55) on the Kafka listener (docs/kafka-listener.md, "What the
answers mean here").

A KRaft broker forwards DescribeQuorum to the active controller, so Kafka's
``kafka-metadata-quorum --bootstrap-server`` (the Admin's ``describeMetadataQuorum``) can name a
broker. This broker does the same through the controllers' gRPC QuorumService, as its own
gRPC QuorumService already does for ``metaquorum quorum describe --bootstrap-server``, and
translates the answer into Kafka's response: the leader, its epoch and high watermark, every
voter and observer with its log end offset, last fetch and last caught-up times and (v2) its
directory id, and (v2) the voters' endpoints as Kafka's ``nodes``.

In Kafka's order: DESCRIBE on the cluster (CLUSTER_AUTHORIZATION_FAILED), then the one
partition a request may name, ``__cluster_metadata`` partition 0 (UNKNOWN_TOPIC_OR_PARTITION
otherwise, at the top level as Kafka's ``KafkaRaftClient`` answers it). A controller that could
not be reached is NOT_LEADER_OR_FOLLOWER (retriable: the Admin retries it).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Final

from broker.kafka.protocol import Request
from quorum.errors import ErrorCode
from quorum.metadata.image import CLUSTER_METADATA_TOPIC_NAME, MetadataImage
from quorum.rpc.v1 import raft_pb2
from quorum.security.acls import AclOperation, ResourceType
from quorum.security.authorization import RequestAuthorization

__all__ = ["DescribeQuorumHandler", "QuorumUnreachableError", "nodes_of"]

# The one partition of the metadata log.
METADATA_PARTITION: Final = 0
# The gRPC answer's endpoints are `LISTENER://host:port`.
_SCHEME_SEPARATOR: Final = "://"


class QuorumUnreachableError(Exception):
    """No controller answered the forwarded DescribeQuorum."""


def _directory_id(raw: bytes) -> uuid.UUID | None:
    return uuid.UUID(bytes=raw) if len(raw) == 16 else None


def _replica(state: raft_pb2.ReplicaState) -> dict[str, Any]:
    return {
        "replica_id": state.replica_id,
        "replica_directory_id": _directory_id(state.directory_id),
        "log_end_offset": state.log_end_offset,
        "last_fetch_timestamp": state.last_fetch_timestamp_ms,
        "last_caught_up_timestamp": state.last_caught_up_timestamp_ms,
    }


def nodes_of(voters: list[raft_pb2.ReplicaState]) -> list[dict[str, Any]]:
    """Kafka's ``nodes`` (v2): each voter's listeners by name, host and port. An endpoint that
    does not parse as ``NAME://host:port`` is left out rather than guessed at."""
    nodes: list[dict[str, Any]] = []
    for voter in voters:
        listeners: list[dict[str, Any]] = []
        for endpoint in voter.endpoints:
            name, separator, address = endpoint.partition(_SCHEME_SEPARATOR)
            host, colon, port = address.rpartition(":")
            if not (separator and colon and name and host and port.isdigit()):
                continue
            if not 0 < int(port) < 65536:
                continue
            listeners.append({"name": name, "host": host.strip("[]"), "port": int(port)})
        nodes.append({"node_id": voter.replica_id, "listeners": listeners})
    return nodes


class DescribeQuorumHandler:
    def __init__(
        self,
        describe: Callable[[raft_pb2.DescribeQuorumRequest], Awaitable[Any]],
        authorization: RequestAuthorization,
        read_image: Callable[[Any], Awaitable[MetadataImage]],
        *,
        cluster_id: str,
    ) -> None:
        """``describe``: the controllers' answer to a DescribeQuorum (raises
        ``QuorumUnreachableError`` when none answers)."""
        self._describe = describe
        self._authorization = authorization
        self._read_image = read_image
        self._cluster_id = cluster_id

    async def handle(self, request: Request, session: Any) -> dict[str, Any]:
        image = await self._read_image(session)
        if not self._authorization.allows(
            session.caller, image, AclOperation.DESCRIBE, ResourceType.CLUSTER
        ):
            return self._top_level(
                ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                f"{session.caller.principal} may not DESCRIBE the cluster, which "
                "DescribeQuorum needs (an ACL on the cluster resource, or a super user)",
            )
        asked = [
            (str(topic.topic_name), int(partition.partition_index))
            for topic in request.body.topics
            for partition in topic.partitions
        ]
        if asked != [(CLUSTER_METADATA_TOPIC_NAME, METADATA_PARTITION)]:
            return self._top_level(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"DescribeQuorum describes exactly one partition, {CLUSTER_METADATA_TOPIC_NAME}-"
                f"{METADATA_PARTITION}; the request named {asked[:5]}",
            )
        forwarded = raft_pb2.DescribeQuorumRequest(
            cluster_id=self._cluster_id, partition_index=METADATA_PARTITION
        )
        try:
            answer = await self._describe(forwarded)
        except QuorumUnreachableError as exc:
            return self._top_level(
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"this broker could not reach a controller ({exc}); retry shortly",
            )
        voters = list(answer.current_voters)
        partition = {
            "partition_index": METADATA_PARTITION,
            "error_code": answer.error_code,
            "error_message": answer.error_message or None,
            "leader_id": answer.leader_id,
            "leader_epoch": answer.leader_epoch,
            "high_watermark": answer.high_watermark,
            "current_voters": [_replica(v) for v in voters],
            "observers": [_replica(o) for o in answer.observers],
        }
        return {
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "topics": [{"topic_name": CLUSTER_METADATA_TOPIC_NAME, "partitions": [partition]}],
            "nodes": nodes_of(voters) if answer.error_code == 0 else [],
        }

    @staticmethod
    def _top_level(code: ErrorCode, message: str) -> dict[str, Any]:
        return {"error_code": code, "error_message": message, "topics": [], "nodes": []}
