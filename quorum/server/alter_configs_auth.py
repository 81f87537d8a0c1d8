"""Who may change which configs (AdminService/AlterConfigs): ALTER_CONFIGS on each topic (else
TOPIC_AUTHORIZATION_FAILED, whether or not it exists), and on the cluster for a BROKER resource
(the cluster-wide default; else CLUSTER_AUTHORIZATION_FAILED), as Kafka's. A resource named
twice is left to the controller (INVALID_REQUEST), as Kafka checks that first."""

from __future__ import annotations

from collections import Counter

from quorum.controller.alter_configs import AlterConfigsRequest
from quorum.controller.names import quote
from quorum.errors import ErrorCode
from quorum.metadata.image import MetadataImage
from quorum.metadata.records import ConfigResourceType
from quorum.security.acls import AclOperation, ResourceType
from quorum.security.authorization import RequestAuthorization
from quorum.security.identity import Caller

__all__ = ["alter_configs_refusals"]


def alter_configs_refusals(
    authorization: RequestAuthorization,
    caller: Caller,
    image: MetadataImage,
    alter: AlterConfigsRequest,
) -> dict[int, tuple[ErrorCode, str]]:
    """Position -> (code, message) for each resource the caller may not alter."""
    named = Counter((r.resource_type, r.resource_name) for r in alter.resources)
    cluster_allowed: bool | None = None
    refused: dict[int, tuple[ErrorCode, str]] = {}
    for index, resource in enumerate(alter.resources):
        key = (resource.resource_type, resource.resource_name)
        if named[key] > 1:
            continue
        if resource.resource_type == ConfigResourceType.TOPIC:
            if not authorization.allows_topic(
                caller, image, AclOperation.ALTER_CONFIGS, resource.resource_name
            ):
                refused[index] = (
                    ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                    f"{caller.principal} may not ALTER_CONFIGS topic "
                    f"{quote(resource.resource_name)}: the ACLs do not allow it (metaquorum acls "
                    f"--add --allow-principal {caller.principal} --operation ALTER_CONFIGS "
                    "--topic NAME)",
                )
        elif resource.resource_type == ConfigResourceType.BROKER:
            if cluster_allowed is None:
                cluster_allowed = authorization.allows(
                    caller, image, AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER
                )
            if not cluster_allowed:
                refused[index] = (
                    ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                    f"{caller.principal} may not alter broker configs: that needs "
                    f"ALTER_CONFIGS on the cluster (metaquorum acls --add --allow-principal "
                    f"{caller.principal} --operation AlterConfigs --cluster)",
                )
    return refused
