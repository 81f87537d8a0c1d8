"""DescribeConfigs (API key 32, v1-v4) on the Kafka listener: what ``kafka-configs.sh
--describe`` and ``Admin.describeConfigs`` send (docs/kafka-listener.md#broker-configs).

Answered from this broker's own ``MetadataImage`` and configuration, as Kafka's
``ConfigHelper``:

- a TOPIC resource: every supported topic config with its value here: the topic's own
  (``TOPIC_CONFIG``), else its broker synonym's value in force on this broker (its dynamic
  value, the cluster-wide one, the file's, Kafka's default; ``quorum/controller/
  broker_configs.py``). Needs DESCRIBE_CONFIGS on the topic (else TOPIC_AUTHORIZATION_FAILED,
  whether it exists or not); UNKNOWN_TOPIC_OR_PARTITION.
- a BROKER resource named by this broker's id: every key of its configuration, the dynamic
  ones with the value in force; the empty name: the cluster-wide dynamic defaults that are set.
  Another broker's id is INVALID_REQUEST (Kafka's clients send it to that broker), as is a name
  that is not an integer. Needs DESCRIBE_CONFIGS on the cluster (else
  CLUSTER_AUTHORIZATION_FAILED).
- any other resource type: INVALID_REQUEST.

Sources and synonyms are Kafka's: per broker config, the synonyms (``log.retention.ms``,
``.minutes``, ``.hours``) from every level that sets one, most specific level first
(DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG),
the leading ones of other names dropped (Kafka's ``configSynonyms``); a config's source is its
first synonym's, DEFAULT_CONFIG without one. A sensitive config (``ssl.keystore.key``) has a
null value in the entry and its synonyms. ``read_only``: every broker config but the dynamic
ones. ``include_documentation``: the key's line of docs/operating.md for broker configs (None
for topic configs).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from broker.kafka.protocol import Request
from broker.node_configs import NodeConfigEntry, node_config_entries
from quorum.config import NodeConfig
from quorum.controller.broker_configs import (
    BROKER_CONFIG_SYNONYMS,
    DYNAMIC_BROKER_CONFIGS,
    TOPIC_CONFIG_SYNONYM,
    ConfigType,
    merged_broker_configs,
    topic_defaults,
)
from quorum.controller.configs import TOPIC_CONFIG_DEFAULTS
from quorum.controller.names import legal_name_error, quote
from quorum.errors import ErrorCode
from quorum.metadata.image import MetadataImage
from quorum.metadata.records import ConfigResourceType
from quorum.security.acls import AclOperation, ResourceType
from quorum.security.authorization import RequestAuthorization
from quorum.security.identity import Caller

__all__ = [
    "CONFIG_SOURCE_DEFAULT",
    "CONFIG_SOURCE_DYNAMIC_TOPIC",
    "TOPIC_CONFIG_TYPES",
    "DescribeConfigsHandler",
]

# Kafka's DescribeConfigsResponse.ConfigSource codes.
CONFIG_SOURCE_DYNAMIC_TOPIC: Final = 1  # TOPIC_CONFIG
CONFIG_SOURCE_DYNAMIC_BROKER: Final = 2
CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER: Final = 3
CONFIG_SOURCE_STATIC_BROKER: Final = 4
CONFIG_SOURCE_DEFAULT: Final = 5

TOPIC_CONFIG_TYPES: Final = {
    "cleanup.policy": ConfigType.LIST,
    "compression.type": ConfigType.STRING,
    "max.message.bytes": ConfigType.INT,
    "min.insync.replicas": ConfigType.INT,
    "retention.bytes": ConfigType.LONG,
    "retention.ms": ConfigType.LONG,
    "segment.bytes": ConfigType.INT,
    "segment.ms": ConfigType.LONG,
    "message.timestamp.type": ConfigType.STRING,
    "message.timestamp.before.max.ms": ConfigType.LONG,
    "message.timestamp.after.max.ms": ConfigType.LONG,
    "unclean.leader.election.enable": ConfigType.BOOLEAN,
}
assert set(TOPIC_CONFIG_TYPES) == set(TOPIC_CONFIG_DEFAULTS)

ReadImage = Callable[[Any], Awaitable[MetadataImage]]
Denied = Callable[[Caller, AclOperation, str], str]


@dataclass(frozen=True, slots=True)
class _Levels:
    """The broker configs of each level, by Kafka name (Kafka's ``DynamicBrokerConfig``
    maps): the broker's dynamic ones, the cluster-wide dynamic ones, its file's, the
    defaults."""

    dynamic_broker: Mapping[str, str]
    dynamic_default: Mapping[str, str]
    static: Mapping[str, str]
    static_default: Mapping[str, str]

    def synonyms(self, name: str, sensitive: bool) -> list[dict[str, Any]]:
        """Kafka's ``configSynonyms(name, brokerConfigSynonyms(name))``."""
        names = BROKER_CONFIG_SYNONYMS.get(name, (name,))
        found = [
            {"name": synonym, "value": None if sensitive else level[synonym], "source": source}
            for level, source in (
                (self.dynamic_broker, CONFIG_SOURCE_DYNAMIC_BROKER),
                (self.dynamic_default, CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER),
                (self.static, CONFIG_SOURCE_STATIC_BROKER),
                (self.static_default, CONFIG_SOURCE_DEFAULT),
            )
            for synonym in names
            if synonym in level
        ]
        while found and found[0]["name"] != name:
            found.pop(0)
        return found


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
        self._broker_id = broker_id
        self._authorization = authorization
        self._read_image = read_image
        self._denied = denied
        self._entries: tuple[NodeConfigEntry, ...] = (
            tuple(node_config_entries(node_config)) if node_config is not None else ()
        )
        self._by_name = {e.name: e for e in self._entries}
        # A sensitive value is never kept here: its synonym says only that the file set it.
        self._static: dict[str, str] = {}
        for e in self._entries:
            if e.given and (e.value is not None or e.sensitive):
                self._static[e.name] = e.value if e.value is not None else ""
        defaults = {
            name: config.default
            for name, config in DYNAMIC_BROKER_CONFIGS.items()
            if config.default is not None
        }
        defaults |= {
            e.name: e.value
            for e in self._entries
            if e.value is not None and not e.given and e.name not in DYNAMIC_BROKER_CONFIGS
        }
        self._static_default: Mapping[str, str] = defaults

    def _levels(self, image: MetadataImage) -> _Levels:
        return _Levels(
            image.broker_configs.get(str(self._broker_id), {}),
            image.cluster_configs,
            self._static,
            self._static_default,
        )

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
            if resource.resource_type == ConfigResourceType.TOPIC:
                answer = self._topic(image, caller, resource.resource_name, keys)
            elif resource.resource_type == ConfigResourceType.BROKER:
                answer = self._broker(image, caller, resource.resource_name, keys)
            else:
                answer = (
                    ErrorCode.INVALID_REQUEST,
                    f"Unsupported resource type: {resource.resource_type} (described here: "
                    f"TOPIC ({ConfigResourceType.TOPIC}) and BROKER "
                    f"({ConfigResourceType.BROKER}))",
                )
            if isinstance(answer, tuple):
                results.append(result | {"error_code": answer[0], "error_message": answer[1]})
                continue
            configs = [
                entry
                | {
                    "is_default": entry["config_source"] == CONFIG_SOURCE_DEFAULT,
                    "synonyms": entry["synonyms"] if include_synonyms else [],
                    "documentation": entry["documentation"] if include_documentation else None,
                }
                for entry in answer
            ]
            results.append(result | {"configs": configs})
        return {"results": results}

    # ----- topics ------------------------------------------------------------------------------

    def _topic(
        self, image: MetadataImage, caller: Caller, name: str, keys: Any
    ) -> list[dict[str, Any]] | tuple[ErrorCode, str]:
        if not self._authorization.allows_topic(caller, image, AclOperation.DESCRIBE_CONFIGS, name):
            return (
                ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                self._denied(caller, AclOperation.DESCRIBE_CONFIGS, f"topic {quote(name)}"),
            )
        if legal_name_error(name) is not None:
            return ErrorCode.INVALID_TOPIC_EXCEPTION, f"{quote(name)} is not a legal topic name"
        topic = image.topic_by_name(name)
        if topic is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {quote(name)} does not exist"
        levels = self._levels(image)
        defaults = topic_defaults(
            merged_broker_configs(image.broker_configs, self._broker_id, self._static)
        )
        entries = []
        for key in sorted(set(TOPIC_CONFIG_DEFAULTS) | set(topic.configs)):
            if keys is not None and key not in keys:
                continue
            broker_name = TOPIC_CONFIG_SYNONYM.get(key)
            synonyms = [] if broker_name is None else levels.synonyms(broker_name, False)
            value = topic.configs.get(key)
            if value is not None:
                synonyms.insert(
                    0, {"name": key, "value": value, "source": CONFIG_SOURCE_DYNAMIC_TOPIC}
                )
            else:
                value = defaults.get(key, TOPIC_CONFIG_DEFAULTS.get(key))
            entries.append(
                {
                    "name": key,
                    "value": value,
                    "read_only": False,
                    "config_source": synonyms[0]["source"] if synonyms else CONFIG_SOURCE_DEFAULT,
                    "is_sensitive": False,
                    "synonyms": synonyms,
                    "config_type": TOPIC_CONFIG_TYPES.get(key, ConfigType.STRING),
                    "documentation": None,
                }
            )
        return entries

    # ----- brokers -----------------------------------------------------------------------------

    def _broker(
        self, image: MetadataImage, caller: Caller, name: str, keys: Any
    ) -> list[dict[str, Any]] | tuple[ErrorCode, str]:
        if not self._authorization.allows(
            caller, image, AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER
        ):
            return (
                ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                self._denied(caller, AclOperation.DESCRIBE_CONFIGS, "the cluster's configs"),
            )
        levels = self._levels(image)
        if not name:
            # Kafka: only the cluster-wide defaults that are set, with only their own synonyms.
            return [
                self._broker_entry(levels, key, value, per_broker=False)
                for key, value in sorted(image.cluster_configs.items())
                if keys is None or key in keys
            ]
        if not (name.lstrip("-").isascii() and name.lstrip("-").isdigit()):
            return ErrorCode.INVALID_REQUEST, f"Broker id must be an integer, but it is: {name}"
        if int(name) != self._broker_id:
            return (
                ErrorCode.INVALID_REQUEST,
                f"Unexpected broker id, expected {self._broker_id} or empty string, but "
                f"received {name}: ask broker {name} itself (Kafka's clients do)",
            )
        merged = merged_broker_configs(image.broker_configs, self._broker_id, self._static)
        values: dict[str, str | None] = {e.name: e.value for e in self._entries}
        for key, config in DYNAMIC_BROKER_CONFIGS.items():
            values[key] = merged.get(key, config.default)
        return [
            self._broker_entry(levels, key, value, per_broker=True)
            for key, value in sorted(values.items())
            if keys is None or key in keys
        ]

    def _broker_entry(
        self, levels: _Levels, key: str, value: str | None, *, per_broker: bool
    ) -> dict[str, Any]:
        entry = self._by_name.get(key)
        dynamic = DYNAMIC_BROKER_CONFIGS.get(key)
        sensitive = entry is not None and entry.sensitive
        synonyms = levels.synonyms(key, sensitive)
        if not per_broker:
            synonyms = [s for s in synonyms if s["source"] == CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER]
        if dynamic is not None:
            config_type = dynamic.config_type
        else:
            config_type = entry.config_type if entry is not None else ConfigType.UNKNOWN
        return {
            "name": key,
            "value": None if sensitive else value,
            "read_only": dynamic is None,
            "config_source": synonyms[0]["source"] if synonyms else CONFIG_SOURCE_DEFAULT,
            "is_sensitive": sensitive,
            "synonyms": synonyms,
            "config_type": config_type,
            "documentation": entry.doc if entry is not None else None,
        }
