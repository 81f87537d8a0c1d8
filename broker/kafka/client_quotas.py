"""DescribeClientQuotas (API key 48, v0-v1) and AlterClientQuotas (API key 49, v0-v1) on the
Kafka listener: what ``kafka-configs.sh --entity-type users|clients`` and
``Admin.describeClientQuotas`` / ``alterClientQuotas`` send (docs/kafka-listener.md#client-quotas).

DescribeClientQuotas is answered from the broker's image, as Kafka's brokers answer it from
their metadata cache: DESCRIBE_CONFIGS on the cluster, else CLUSTER_AUTHORIZATION_FAILED;
Kafka's filter rules (``quorum.metadata.client_quotas.describe_client_quotas``): INVALID_REQUEST
for a bad filter, UNSUPPORTED_VERSION for an unknown entity type.

AlterClientQuotas is forwarded to the active controller as ``AdminService/AlterClientQuotas``
with the client's principal (KIP-590, ``broker/kafka/forwarding.py``); the controller
authorizes (ALTER_CONFIGS on the cluster) and decides (``quorum/controller/client_quotas.py``).
A request-level refusal or a forwarding failure (NOT_CONTROLLER, REQUEST_TIMED_OUT) answers
every entry with its code, as Kafka does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

from broker.kafka.forwarding import FORWARD_TIMEOUT_MS_MAX
from broker.kafka.protocol import Request
from quorum.errors import ErrorCode
from quorum.metadata.client_quotas import DescribeFilterError, describe_client_quotas
from quorum.metadata.image import MetadataImage
from quorum.rpc.v1 import admin_pb2
from quorum.security.acls import AclOperation, ResourceType
from quorum.security.authorization import RequestAuthorization

__all__ = ["AlterClientQuotasHandler", "DescribeClientQuotasHandler"]

# Forwards an admin RPC as the session's caller: (the answer, None) or (None, (code, message)).
Forward = Callable[[str, Any, Any, int], Awaitable[tuple[Any, tuple[ErrorCode, str] | None]]]

# AlterClientQuotas has no timeout of its own: the forwarder's bound applies.
_TIMEOUT_MS: Final = FORWARD_TIMEOUT_MS_MAX


def _entity(components: Any) -> list[dict[str, Any]]:
    return [{"entity_type": c.entity_type, "entity_name": c.entity_name} for c in components]


class AlterClientQuotasHandler:
    def __init__(self, forward: Forward) -> None:
        """``forward``: ``KafkaApis._forward`` (moves the connection's read-your-writes
        offset)."""
        self._forward = forward

    async def handle(self, request: Request, session: Any) -> dict[str, Any]:
        body = request.body
        pb = admin_pb2.AlterClientQuotasRequest(validate_only=bool(body.validate_only))
        for entry in body.entries:
            item = pb.entries.add()
            for component in entry.entity:
                part = item.entity.add(entity_type=component.entity_type)
                if component.entity_name is not None:
                    part.entity_name = component.entity_name
            for op in entry.ops:
                change = item.ops.add(key=op.key)
                if not op.remove:
                    change.value = float(op.value)
        answer, failure = None, None
        if pb.entries:
            answer, failure = await self._forward("AlterClientQuotas", pb, session, _TIMEOUT_MS)
        entries = []
        results = list(answer.results) if answer is not None else []
        for index, entry in enumerate(body.entries):
            code: ErrorCode
            message: str | None
            if failure is not None:
                code, message = failure
            else:
                result = results[index]
                code, message = ErrorCode(result.error_code), result.error_message or None
            entries.append(
                {"error_code": code, "error_message": message, "entity": _entity(entry.entity)}
            )
        return {"entries": entries}


class DescribeClientQuotasHandler:
    def __init__(
        self,
        authorization: RequestAuthorization,
        read_image: Callable[[Any], Awaitable[MetadataImage]],
    ) -> None:
        """``read_image``: ``KafkaApis._read_image`` (the image after the connection's last
        write)."""
        self._authorization = authorization
        self._read_image = read_image

    async def handle(self, request: Request, session: Any) -> dict[str, Any]:
        body = request.body
        image = await self._read_image(session)
        caller = session.caller
        if not self._authorization.allows(
            caller, image, AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER
        ):
            return _refused(
                ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                f"{caller.principal} may not DESCRIBE_CONFIGS client quotas: that needs "
                f"DESCRIBE_CONFIGS on the cluster (metaquorum acls --add --allow-principal "
                f"{caller.principal} --operation DESCRIBE_CONFIGS --cluster)",
            )
        try:
            found = describe_client_quotas(
                image.client_quotas,
                [(c.entity_type, int(c.match_type), c.match) for c in body.components],
                strict=bool(body.strict),
            )
        except DescribeFilterError as exc:
            code = ErrorCode.UNSUPPORTED_VERSION if exc.unsupported else ErrorCode.INVALID_REQUEST
            return _refused(code, str(exc))
        return {
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "entries": [
                {
                    "entity": [{"entity_type": kind, "entity_name": name} for kind, name in entity],
                    "values": [{"key": key, "value": value} for key, value in values.items()],
                }
                for entity, values in found
            ],
        }


def _refused(code: ErrorCode, message: str) -> dict[str, Any]:
    """Kafka's answer to a refused DescribeClientQuotas: the code, the message, null entries."""
    return {"error_code": code, "error_message": message, "entries": None}
