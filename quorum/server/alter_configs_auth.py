"""Who may change which configs (AdminService/AlterConfigs): ALTER_CONFIGS on each topic (else
TOPIC_AUTHORIZATION_FAILED, whether or not it exists), and on the cluster for a BROKER resource
(a broker's or the cluster-wide default; else CLUSTER_AUTHORIZATION_FAILED), as Kafka's. A
resource named twice is left to the controller (INVALID_REQUEST), as Kafka checks that first.
And who may read them (AdminService/DescribeConfigs, ``describe_configs_answer``):
DESCRIBE_CONFIGS, likewise."""

from __future__ import annotations

import dataclasses
from collections import Counter

from quorum.controller.alter_configs import AlterConfigsRequest
from quorum.controller.describe_configs import (
    DescribeConfigsOutcome,
    Describer,
    describe_resource,
)
from quorum.controller.names import quote
from quorum.errors import ErrorCode
from quorum.metadata.image import MetadataImage
from quorum.metadata.records import ConfigResourceType
from quorum.rpc.v1 import admin_pb2
from quorum.security.acls import AclOperation, ResourceType
from quorum.security.authorization import RequestAuthorization
from quorum.security.identity import Caller

__all__ = ["alter_configs_refusals", "describe_configs_answer"]


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


def describe_configs_answer(
    describer: Describer,
    authorization: RequestAuthorization,
    caller: Caller,
    image: MetadataImage,
    request: admin_pb2.DescribeConfigsRequest,
) -> list[DescribeConfigsOutcome]:
    """AdminService/DescribeConfigs: each resource described from ``image`` by ``describer``,
    authorized as on the Kafka listener (DESCRIBE_CONFIGS on the topic, on the cluster for a
    BROKER resource). Synonyms and documentation only when asked for."""

    def allowed(resource_type: int, name: str) -> bool:
        if resource_type == ConfigResourceType.TOPIC:
            return authorization.allows_topic(caller, image, AclOperation.DESCRIBE_CONFIGS, name)
        return authorization.allows(
            caller, image, AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER
        )

    def denied(what: str) -> str:
        return (
            f"{caller.principal} may not DESCRIBE_CONFIGS {what}: the ACLs do not allow it "
            f"(metaquorum acls --add --allow-principal {caller.principal} --operation "
            "DescribeConfigs ...)"
        )

    outcomes = []
    for resource in request.resources:
        outcome = describe_resource(
            describer,
            image,
            resource.resource_type,
            resource.resource_name,
            list(resource.configuration_keys) or None,
            allowed=allowed,
            denied=denied,
        )
        outcomes.append(
            dataclasses.replace(
                outcome,
                configs=tuple(
                    dataclasses.replace(
                        c,
                        synonyms=c.synonyms if request.include_synonyms else (),
                        documentation=c.documentation if request.include_documentation else None,
                    )
                    for c in outcome.configs
                ),
            )
        )
    return outcomes
