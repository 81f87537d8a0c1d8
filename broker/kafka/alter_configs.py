"""IncrementalAlterConfigs (API key 44, v0-v1) and AlterConfigs (API key 33, v0-v2) on the Kafka
listener: what ``kafka-configs.sh --alter`` and ``Admin.incrementalAlterConfigs`` send
(docs/kafka-listener.md).

Forwarded to the active controller as ``AdminService/AlterConfigs`` with the client's principal
(KIP-590, ``broker/kafka/forwarding.py``), as CreateTopics is; the controller authorizes
(ALTER_CONFIGS on each topic, else TOPIC_AUTHORIZATION_FAILED) and decides
(``quorum/controller/alter_configs.py``): INVALID_CONFIG, INVALID_REQUEST (a resource named
twice, APPEND / SUBTRACT on a config that is not a list, a named broker),
UNKNOWN_TOPIC_OR_PARTITION. A broker resource with the empty name is the cluster-wide default
(ALTER_CONFIGS on the cluster, else CLUSTER_AUTHORIZATION_FAILED). AlterConfigs carries no op:
its configs replace the resource's whole set. A forwarding failure (NOT_CONTROLLER,
REQUEST_TIMED_OUT) answers every resource.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

from broker.kafka.forwarding import FORWARD_TIMEOUT_MS_MAX
from broker.kafka.protocol import Request
from quorum.errors import ErrorCode
from quorum.rpc.v1 import admin_pb2

__all__ = ["AlterConfigsHandler"]

# Forwards an admin RPC as the session's caller: (the answer, None) or (None, (code, message)).
Forward = Callable[[str, Any, Any, int], Awaitable[tuple[Any, tuple[ErrorCode, str] | None]]]

# Neither request has a timeout of its own: the forwarder's bound applies.
_TIMEOUT_MS: Final = FORWARD_TIMEOUT_MS_MAX


class AlterConfigsHandler:
    def __init__(self, forward: Forward, *, incremental: bool) -> None:
        """``forward``: ``KafkaApis._forward`` (moves the connection's read-your-writes offset).
        ``incremental``: IncrementalAlterConfigs (each config's op), else AlterConfigs."""
        self._forward = forward
        self._incremental = incremental

    async def handle(self, request: Request, session: Any) -> dict[str, Any]:
        body = request.body
        pb = admin_pb2.AlterConfigsRequest(
            validate_only=bool(body.validate_only), incremental=self._incremental
        )
        for resource in body.resources:
            entry = pb.resources.add(
                resource_type=int(resource.resource_type), resource_name=resource.resource_name
            )
            for config in resource.configs:
                item = entry.configs.add(
                    name=config.name,
                    op=int(config.config_operation) if self._incremental else 0,
                )
                if config.value is not None:
                    item.value = config.value
        if not pb.resources:
            return {"responses": []}
        answer, failure = await self._forward("AlterConfigs", pb, session, _TIMEOUT_MS)
        if answer is None:
            assert failure is not None
            code, message = failure
            return {
                "responses": [
                    _result(r.resource_type, r.resource_name, code, message) for r in pb.resources
                ]
            }
        return {
            "responses": [
                _result(r.resource_type, r.resource_name, r.error_code, r.error_message or None)
                for r in answer.results
            ]
        }


def _result(resource_type: int, name: str, code: int, message: str | None) -> dict[str, Any]:
    return {
        "error_code": ErrorCode(code),
        "error_message": message,
        "resource_type": resource_type,
        "resource_name": name,
    }
