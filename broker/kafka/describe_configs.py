"""DescribeConfigs (API key 32, v0-v4) on the Kafka listener: what ``kafka-configs.sh
--describe`` and ``Admin.describeConfigs`` send (docs/kafka-listener.md#broker-configs).

Answered from this broker's own ``MetadataImage`` and configuration by
``quorum/controller/describe_configs.py`` (topics, this broker, the cluster-wide default, with
Kafka's sources and synonyms), authorized here as Kafka's ``KafkaApis`` does: DESCRIBE_CONFIGS
on the topic (else TOPIC_AUTHORIZATION_FAILED, whether it exists or not; ALTER_CONFIGS implies
it), on the cluster for a broker resource (else CLUSTER_AUTHORIZATION_FAILED). An unknown topic
is UNKNOWN_TOPIC_OR_PARTITION, another broker's id or any other resource type INVALID_REQUEST.
``include_documentation``: a broker key's line of docs/operating.md (None for topic configs).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from broker.kafka.protocol import Request
from broker.node_configs import node_config_entries
from quorum.config import NodeConfig
from quorum.controller.describe_configs import (
    CONFIG_SOURCE_DEFAULT,
    CONFIG_SOURCE_DYNAMIC_TOPIC,
    DescribedConfig,
    Describer,
    describe_resource,
)
from quorum.errors import ErrorCode
from quorum.metadata.image import MetadataImage
from quorum.metadata.records import ConfigResourceType
from quorum.security.acls import AclOperation, ResourceType
from quorum.security.authorization import RequestAuthorization
from quorum.security.identity import Caller

__all__ = ["CONFIG_SOURCE_DEFAULT", "CONFIG_SOURCE_DYNAMIC_TOPIC", "DescribeConfigsHandler"]

ReadImage = Callable[[Any], Awaitable[MetadataImage]]
Denied = Callable[[Caller, AclOperation, str], str]


class DescribeConfigsHandler:
    def __init__(
        self,
        *,
        broker_id: int,
        authorization: RequestAuthorization,
        read_image: ReadImage,
        denied: Denied,
        node_config: NodeConfig | None = None,
    ) -> None:
        """``read_image``: the image to answer from (read-your-writes, ``KafkaApis``).
        ``node_config``: this broker's configuration (None: a listener without one, in tests:
        only the dynamic configs and Kafka's defaults are described)."""
        self._authorization = authorization
        self._read_image = read_image
        self._denied = denied
        entries = node_config_entries(node_config) if node_config is not None else []
        self._describer = Describer(broker_id, entries)

    async def handle(self, request: Request, session: Any) -> dict[str, Any]:
        body = request.body
        image = await self._read_image(session)
        caller: Caller = session.caller
        include_synonyms = bool(getattr(body, "include_synonyms", False))
        include_documentation = bool(getattr(body, "include_documentation", False))
        results = []
        for resource in body.resources:
            result: dict[str, Any] = {
                "resource_type": resource.resource_type,
                "resource_name": resource.resource_name,
                "error_code": ErrorCode.NONE,
                "error_message": None,
                "configs": [],
            }
            keys = resource.configuration_keys or None  # empty: all, as Kafka's
            answer = self._describe(
                image, caller, resource.resource_type, resource.resource_name, keys
            )
            if isinstance(answer, tuple):
                results.append(result | {"error_code": answer[0], "error_message": answer[1]})
                continue
            configs = [_entry(config, include_synonyms, include_documentation) for config in answer]
            results.append(result | {"configs": configs})
        return {"results": results}

    def _describe(
        self, image: MetadataImage, caller: Caller, resource_type: int, name: str, keys: Any
    ) -> list[DescribedConfig] | tuple[ErrorCode, str]:
        def allowed(resource_type: int, name: str) -> bool:
            if resource_type == ConfigResourceType.TOPIC:
                return self._authorization.allows_topic(
                    caller, image, AclOperation.DESCRIBE_CONFIGS, name
                )
            return self._authorization.allows(
                caller, image, AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER
            )

        outcome = describe_resource(
            self._describer,
            image,
            resource_type,
            name,
            keys,
            allowed=allowed,
            denied=lambda what: self._denied(caller, AclOperation.DESCRIBE_CONFIGS, what),
        )
        if outcome.error_code != ErrorCode.NONE:
            return outcome.error_code, outcome.error_message or ""
        return list(outcome.configs)


def _entry(config: DescribedConfig, synonyms: bool, documentation: bool) -> dict[str, Any]:
    """The response entry (the newest version's shape; ``is_default`` for v0)."""
    return {
        "name": config.name,
        "value": config.value,
        "read_only": config.read_only,
        "is_default": config.source == CONFIG_SOURCE_DEFAULT,
        "config_source": config.source,
        "is_sensitive": config.sensitive,
        "synonyms": [
            {"name": s.name, "value": s.value, "source": s.source} for s in config.synonyms
        ]
        if synonyms
        else [],
        "config_type": config.config_type,
        "documentation": config.documentation if documentation else None,
    }
