"""ElectLeaders (API key 43, v0-v2) on the Kafka listener: what ``kafka-leader-election.sh`` and
``Admin.electLeaders`` send (docs/kafka-listener.md).

Forwarded to the active controller as ``AdminService/ElectLeaders`` with the client's principal
(KIP-590, ``broker/kafka/forwarding.py``), as CreateTopics is; the controller decides
(``quorum/controller/elections.py``). The caller needs ALTER on the cluster: checked here first
against the broker's image (CLUSTER_AUTHORIZATION_FAILED, without asking the controller), and
again by the controller. v0 has no election type (PREFERRED) and no top-level error code; a
null list of topic partitions means every partition, whose answer lists only the partitions an
election ran or failed for (Kafka's behaviour). A request-level failure (forwarding failed, an
invalid request) is answered with its code at the top (v1+) and for every partition named.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from broker.kafka.protocol import Request
from quorum.errors import ErrorCode
from quorum.metadata.image import MetadataImage
from quorum.rpc.v1 import admin_pb2
from quorum.security.acls import AclOperation, ResourceType
from quorum.security.authorization import RequestAuthorization

__all__ = ["ElectLeadersHandler"]

# Forwards an admin RPC as the session's caller: (the answer, None) or (None, (code, message)).
Forward = Callable[[str, Any, Any, int], Awaitable[tuple[Any, tuple[ErrorCode, str] | None]]]


class ElectLeadersHandler:
    def __init__(
        self,
        authorization: RequestAuthorization,
        read_image: Callable[[Any], Awaitable[MetadataImage]],
        forward: Forward,
    ) -> None:
        """``forward``: ``KafkaApis._forward`` (moves the connection's read-your-writes offset)."""
        self._authorization = authorization
        self._read_image = read_image
        self._forward = forward

    async def handle(self, request: Request, session: Any) -> dict[str, Any]:
        body = request.body
        named = body.topic_partitions
        wanted = (
            None
            if named is None
            else [(entry.topic, partition) for entry in named for partition in entry.partitions]
        )
        image = await self._read_image(session)
        if not self._authorization.allows(
            session.caller, image, AclOperation.ALTER, ResourceType.CLUSTER
        ):
            return _failed(
                wanted,
                ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                f"{session.caller.principal} may not elect leaders: that needs ALTER on the "
                "cluster",
            )
        pb = admin_pb2.ElectLeadersRequest(
            election_type=int(getattr(body, "election_type", 0)),  # v0: PREFERRED
            all_partitions=wanted is None,
            partitions=[
                admin_pb2.ElectLeadersPartition(topic=topic, partition=partition)
                for topic, partition in wanted or ()
            ],
        )
        timeout_ms = int(body.timeout.total_seconds() * 1000)
        answer, failure = await self._forward("ElectLeaders", pb, session, timeout_ms)
        if answer is None:
            assert failure is not None
            return _failed(wanted, *failure)
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for result in answer.results:
            by_topic.setdefault(result.topic, []).append(
                {
                    "partition_id": result.partition,
                    "error_code": result.error_code,
                    "error_message": result.error_message or None,
                }
            )
        return {"error_code": ErrorCode.NONE, "replica_election_results": _grouped(by_topic)}


def _grouped(by_topic: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [{"topic": topic, "partition_result": results} for topic, results in by_topic.items()]


def _failed(wanted: list[tuple[str, int]] | None, code: ErrorCode, message: str) -> dict[str, Any]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for topic, partition in wanted or ():
        by_topic.setdefault(topic, []).append(
            {"partition_id": partition, "error_code": code, "error_message": message}
        )
    return {"error_code": code, "replica_election_results": _grouped(by_topic)}
