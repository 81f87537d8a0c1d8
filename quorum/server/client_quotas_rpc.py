"""AdminService/AlterClientQuotas and DescribeClientQuotas (Kafka's APIs 49 and 48;
docs/kafka-listener.md#client-quotas): the handlers ``AdminServicer`` delegates to, kept out
of ``admin_service.py`` by concern.

AlterClientQuotas needs ALTER_CONFIGS on the cluster, DescribeClientQuotas DESCRIBE_CONFIGS on
the cluster (Kafka's rules), else CLUSTER_AUTHORIZATION_FAILED for the whole request. Alter is
the controller's ``alter_client_quotas`` (quorum/controller/client_quotas.py), answered once
committed; describe reads this node's image (after ``min_metadata_offset``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import grpc

from quorum.controller.client_quotas import CLIENT_QUOTA_ENTITIES_MAX
from quorum.errors import ErrorCode
from quorum.metadata.client_quotas import DescribeFilterError, describe_client_quotas
from quorum.rpc.v1 import admin_pb2
from quorum.security.acls import AclOperation, ResourceType
from quorum.wire.client_quotas import (
    add_alter_client_quotas_results,
    alter_client_quotas_from_proto,
    entity_to_proto,
)

if TYPE_CHECKING:
    from quorum.server.admin_service import AdminServicer

__all__ = ["AlterClientQuotas", "DescribeClientQuotas"]

# Filter components of one DescribeClientQuotas: each entity type at most once, so more than
# three can only be refused (our bound, before the filter is read).
_FILTER_COMPONENTS_MAX: Final = 3


def _authorize(
    servicer: AdminServicer, context: grpc.aio.ServicerContext, operation: AclOperation
) -> None:
    from quorum.server.admin_service import RequestRejected  # noqa: PLC0415 - a cycle

    caller = servicer._callers.caller(context)
    if not servicer._authorization.allows(
        caller, servicer._image(), operation, ResourceType.CLUSTER
    ):
        raise RequestRejected(
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            f"{caller.principal} may not {operation.name} client quotas: that needs "
            f"{operation.name} on the cluster (metaquorum acls --add --allow-principal "
            f"{caller.principal} --operation {operation.name} --cluster)",
        )


async def AlterClientQuotas(
    servicer: AdminServicer,
    request: admin_pb2.AlterClientQuotasRequest,
    context: grpc.aio.ServicerContext,
) -> admin_pb2.AlterClientQuotasResponse:
    """``AdminServicer.AlterClientQuotas``."""
    response = admin_pb2.AlterClientQuotasResponse()
    body = _alter_client_quotas(servicer, request, context, response)
    return await servicer._guard(response, context, body)


async def DescribeClientQuotas(
    servicer: AdminServicer,
    request: admin_pb2.DescribeClientQuotasRequest,
    context: grpc.aio.ServicerContext,
) -> admin_pb2.DescribeClientQuotasResponse:
    """``AdminServicer.DescribeClientQuotas``."""
    response = admin_pb2.DescribeClientQuotasResponse()
    body = _describe_client_quotas(servicer, request, context, response)
    return await servicer._guard(response, context, body)


async def _alter_client_quotas(
    servicer: AdminServicer,
    request: admin_pb2.AlterClientQuotasRequest,
    context: grpc.aio.ServicerContext,
    response: admin_pb2.AlterClientQuotasResponse,
) -> admin_pb2.AlterClientQuotasResponse:
    from quorum.server.admin_service import RequestRejected  # noqa: PLC0415 - a cycle

    if len(request.entries) > CLIENT_QUOTA_ENTITIES_MAX:
        raise RequestRejected(
            ErrorCode.INVALID_REQUEST,
            f"{len(request.entries)} entities in one AlterClientQuotas; at most "
            f"{CLIENT_QUOTA_ENTITIES_MAX} are allowed: split it",
        )
    alter = alter_client_quotas_from_proto(request)
    if servicer._write_image() is not None:
        _authorize(servicer, context, AclOperation.ALTER_CONFIGS)
    answer, offset = await servicer._write(
        context, lambda sm, next_offset: sm.alter_client_quotas(alter, next_offset=next_offset)
    )
    add_alter_client_quotas_results(response, answer.results)
    servicer._header(response)
    response.metadata_offset = offset
    return response


async def _describe_client_quotas(
    servicer: AdminServicer,
    request: admin_pb2.DescribeClientQuotasRequest,
    context: grpc.aio.ServicerContext,
    response: admin_pb2.DescribeClientQuotasResponse,
) -> admin_pb2.DescribeClientQuotasResponse:
    from quorum.server.admin_service import RequestRejected  # noqa: PLC0415 - a cycle

    if len(request.components) > _FILTER_COMPONENTS_MAX:
        raise RequestRejected(
            ErrorCode.INVALID_REQUEST,
            f"{len(request.components)} filter components; each entity type may appear once",
        )
    _authorize(servicer, context, AclOperation.DESCRIBE_CONFIGS)
    await servicer._read_at(request, context)
    image = servicer._image()
    try:
        found = describe_client_quotas(
            image.client_quotas,
            [
                (c.entity_type, c.match_type, c.match if c.HasField("match") else None)
                for c in request.components
            ],
            strict=request.strict,
        )
    except DescribeFilterError as exc:
        code = ErrorCode.UNSUPPORTED_VERSION if exc.unsupported else ErrorCode.INVALID_REQUEST
        raise RequestRejected(code, str(exc)) from None
    for entity, values in found:
        entry = response.entries.add()
        entry.entity.extend(entity_to_proto(entity))
        for key, value in values.items():
            entry.values[key] = value
    servicer._header(response)
    response.metadata_offset = image.offset
    return response
