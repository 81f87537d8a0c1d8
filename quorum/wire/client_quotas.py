"""AlterClientQuotas and DescribeClientQuotas (quorum/rpc/v1/admin.proto) to and from the
controller's dataclasses (``quorum.controller.client_quotas``) and the image's entities
(``quorum.metadata.client_quotas``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from quorum.controller.client_quotas import (
    AlterClientQuotasEntry,
    AlterClientQuotasRequest,
    AlterClientQuotasResult,
)
from quorum.errors import ErrorCode
from quorum.metadata.client_quotas import ClientQuotaEntity
from quorum.metadata.records import ClientQuotaEntityData
from quorum.rpc.v1 import admin_pb2

__all__ = [
    "add_alter_client_quotas_results",
    "alter_client_quotas_from_proto",
    "alter_client_quotas_results_from_proto",
    "alter_client_quotas_to_proto",
    "described_client_quotas_from_proto",
    "entity_from_proto",
    "entity_to_proto",
]


def entity_to_proto(
    entity: Iterable[ClientQuotaEntityData] | ClientQuotaEntity,
) -> list[admin_pb2.ClientQuotaEntityComponent]:
    components = []
    for component in entity:
        kind, name = (
            (component.entity_type, component.entity_name)
            if isinstance(component, ClientQuotaEntityData)
            else component
        )
        pb = admin_pb2.ClientQuotaEntityComponent(entity_type=kind)
        if name is not None:
            pb.entity_name = name
        components.append(pb)
    return components


def entity_from_proto(
    components: Iterable[admin_pb2.ClientQuotaEntityComponent],
) -> tuple[ClientQuotaEntityData, ...]:
    return tuple(
        ClientQuotaEntityData(c.entity_type, c.entity_name if c.HasField("entity_name") else None)
        for c in components
    )


def alter_client_quotas_to_proto(
    request: AlterClientQuotasRequest,
) -> admin_pb2.AlterClientQuotasRequest:
    pb = admin_pb2.AlterClientQuotasRequest(validate_only=request.validate_only)
    for entry in request.entries:
        item = pb.entries.add()
        item.entity.extend(entity_to_proto(entry.entity))
        for key, value in entry.ops:
            op = item.ops.add(key=key)
            if value is not None:
                op.value = value
    return pb


def alter_client_quotas_from_proto(
    request: admin_pb2.AlterClientQuotasRequest,
) -> AlterClientQuotasRequest:
    return AlterClientQuotasRequest(
        tuple(
            AlterClientQuotasEntry(
                entity_from_proto(entry.entity),
                tuple((op.key, op.value if op.HasField("value") else None) for op in entry.ops),
            )
            for entry in request.entries
        ),
        validate_only=request.validate_only,
    )


def add_alter_client_quotas_results(
    response: admin_pb2.AlterClientQuotasResponse, results: Sequence[AlterClientQuotasResult]
) -> None:
    for result in results:
        item = response.results.add(
            error_code=int(result.error_code), error_message=result.error_message or ""
        )
        item.entity.extend(entity_to_proto(result.entity))


def alter_client_quotas_results_from_proto(
    response: admin_pb2.AlterClientQuotasResponse,
) -> tuple[AlterClientQuotasResult, ...]:
    return tuple(
        AlterClientQuotasResult(
            entity_from_proto(r.entity), ErrorCode(r.error_code), r.error_message or None
        )
        for r in response.results
    )


def described_client_quotas_from_proto(
    response: admin_pb2.DescribeClientQuotasResponse,
) -> list[tuple[ClientQuotaEntity, dict[str, float]]]:
    return [
        (
            tuple(
                sorted(
                    (c.entity_type, c.entity_name if c.HasField("entity_name") else None)
                    for c in entry.entity
                )
            ),
            dict(entry.values),
        )
        for entry in response.entries
    ]
