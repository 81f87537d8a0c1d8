"""AlterConfigs (quorum/rpc/v1/admin.proto) to and from the controller's dataclasses
(``quorum.controller.alter_configs``)."""

from __future__ import annotations

from quorum.controller.alter_configs import (
    AlterableConfig,
    AlterConfigsRequest,
    AlterConfigsResource,
    AlterConfigsResponse,
    AlterConfigsResult,
)
from quorum.errors import ErrorCode
from quorum.rpc.v1 import admin_pb2

__all__ = [
    "add_alter_configs_results",
    "alter_configs_from_proto",
    "alter_configs_results_from_proto",
    "alter_configs_to_proto",
]


def alter_configs_from_proto(request: admin_pb2.AlterConfigsRequest) -> AlterConfigsRequest:
    return AlterConfigsRequest(
        tuple(
            AlterConfigsResource(
                r.resource_type,
                r.resource_name,
                tuple(
                    AlterableConfig(c.name, c.op, c.value if c.HasField("value") else None)
                    for c in r.configs
                ),
            )
            for r in request.resources
        ),
        validate_only=request.validate_only,
        incremental=request.incremental,
    )


def alter_configs_to_proto(request: AlterConfigsRequest) -> admin_pb2.AlterConfigsRequest:
    pb = admin_pb2.AlterConfigsRequest(
        validate_only=request.validate_only, incremental=request.incremental
    )
    for resource in request.resources:
        entry = pb.resources.add(
            resource_type=resource.resource_type, resource_name=resource.resource_name
        )
        for config in resource.configs:
            item = entry.configs.add(name=config.name, op=config.op)
            if config.value is not None:
                item.value = config.value
    return pb


def add_alter_configs_results(
    response: admin_pb2.AlterConfigsResponse, results: tuple[AlterConfigsResult, ...]
) -> None:
    for r in results:
        response.results.add(
            resource_type=r.resource_type,
            resource_name=r.resource_name,
            error_code=int(r.error_code),
            error_message=r.error_message or "",
        )


def alter_configs_results_from_proto(
    response: admin_pb2.AlterConfigsResponse,
) -> AlterConfigsResponse:
    return AlterConfigsResponse(
        tuple(
            AlterConfigsResult(
                r.resource_type, r.resource_name, ErrorCode(r.error_code), r.error_message or None
            )
            for r in response.results
        )
    )
