"""IncrementalAlterConfigs (API key 44, v0-v1) and AlterConfigs (API key 33, v0-v2) on the Kafka
listener: what ``kafka-configs.sh --alter`` and ``Admin.incrementalAlterConfigs`` send
(docs/kafka-listener.md).

Forwarded to the active controller as ``AdminService/AlterConfigs`` with the client's principal
(KIP-590, ``broker/kafka/forwarding.py``), as CreateTopics is; the controller authorizes
(ALTER_CONFIGS on each topic, else TOPIC_AUTHORIZATION_FAILED) and decides
(``quorum/controller/alter_configs.py``): INVALID_CONFIG, INVALID_REQUEST (a resource named
twice, APPEND / SUBTRACT on a config that is not a list, a broker config that cannot change
live), UNKNOWN_TOPIC_OR_PARTITION. A broker resource is one broker's dynamic configs, by its id, or
with the empty name the cluster-wide default (ALTER_CONFIGS on the cluster, else
CLUSTER_AUTHORIZATION_FAILED); one naming another broker is refused here, INVALID_REQUEST, as
Kafka's brokers refuse it (its clients send it to that broker). AlterConfigs carries no op:
its configs replace the resource's whole set. A forwarding failure (NOT_CONTROLLER,
REQUEST_TIMED_OUT) answers every resource.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

from broker.kafka.forwarding import FORWARD_TIMEOUT_MS_MAX
from broker.kafka.protocol import Request
from quorum.errors import ErrorCode
from quorum.metadata.records import ConfigResourceType
from quorum.rpc.v1 import admin_pb2

__all__ = ["AlterConfigsHandler"]

# Forwards an admin RPC as the session's caller: (the answer, None) or (None, (code, message)).
Forward = Callable[[str, Any, Any, int], Awaitable[tuple[Any, tuple[ErrorCode, str] | None]]]

# Neither request has a timeout of its own: the forwarder's bound applies.
_TIMEOUT_MS: Final = FORWARD_TIMEOUT_MS_MAX


class AlterConfigsHandler:
    def __init__(
        self, forward: Forward, *, incremental: bool, broker_id: int | None = None
    ) -> None:
        """``forward``: ``KafkaApis._forward`` (moves the connection's read-your-writes offset).
        ``incremental``: IncrementalAlterConfigs (each config's op), else AlterConfigs.
        ``broker_id``: this broker; a BROKER resource naming another one is refused here
        (Kafka's ``ConfigAdminManager``: its clients send a broker's resource to that broker)."""
        self._forward = forward
        self._incremental = incremental
        self._broker_id = broker_id

    def _refusal(self, resource_type: int, name: str) -> str | None:
        """Why a resource is not this broker's to forward (INVALID_REQUEST), or None."""
        if resource_type != ConfigResourceType.BROKER or not name or self._broker_id is None:
            return None
        if not (name.isascii() and name.isdigit()):
            return f"Broker id must be an integer, but it is: {name}"
        if int(name) != self._broker_id:
            return (
                f"Unexpected broker id, expected {self._broker_id}, but received {name}: send "
                f"broker {name}'s configs to broker {name} (Kafka's clients do)"
            )
        return None

    async def handle(self, request: Request, session: Any) -> dict[str, Any]:
        body = request.body
        pb = admin_pb2.AlterConfigsRequest(
            validate_only=bool(body.validate_only), incremental=self._incremental
        )
        refused: dict[int, str] = {}
        for index, resource in enumerate(body.resources):
            reason = self._refusal(int(resource.resource_type), resource.resource_name)
            if reason is not None:
                refused[index] = reason
                continue
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
        answer, failure = None, None
        if pb.resources:
            answer, failure = await self._forward("AlterConfigs", pb, session, _TIMEOUT_MS)
        results = iter(answer.results if answer is not None else ())
        responses = []
        for index, resource in enumerate(body.resources):
            resource_type, name = int(resource.resource_type), resource.resource_name
            if index in refused:
                responses.append(
                    _result(resource_type, name, ErrorCode.INVALID_REQUEST, refused[index])
                )
            elif failure is not None:
                responses.append(_result(resource_type, name, failure[0], failure[1]))
            else:
                r = next(results)
                responses.append(
                    _result(r.resource_type, r.resource_name, r.error_code, r.error_message or None)
                )
        return {"responses": responses}


def _result(resource_type: int, name: str, code: int, message: str | None) -> dict[str, Any]:
    return {
        "error_code": ErrorCode(code),
        "error_message": message,
        "resource_type": resource_type,
        "resource_name": name,
    }
