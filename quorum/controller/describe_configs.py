"""What DescribeConfigs answers for a topic or a broker resource, from an image and (on a
broker) the broker's own configuration, as Kafka's ``ConfigHelper`` builds it. Shared by the
brokers' Kafka listener (``broker/kafka/describe_configs.py``) and the gRPC
``AdminService/DescribeConfigs`` of every node; authorization is the callers'. Pure.

- a topic: every supported topic config with its value on the describing broker: the topic's
  own (``TOPIC_CONFIG``), else its broker synonym's value in force there (``broker_configs``);
- a broker resource named by the describing broker's id: every key of its configuration, the
  dynamic ones with the value in force; the empty name: the cluster-wide dynamic defaults
  that are set. On a broker, another broker's id is INVALID_REQUEST (Kafka's clients ask that
  broker). A node that is not a broker (``Describer(None, ())``, a controller) describes any
  broker id from its image alone: the dynamic broker configs, with what is set dynamically and
  Kafka's defaults (it cannot see a broker's file, so no ``STATIC_BROKER_CONFIG``).

Sources and synonyms are Kafka's: per broker config, the synonyms (``log.retention.ms``,
``.minutes``, ``.hours``) from every level that sets one, most specific level first
(DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG),
the leading ones of other names dropped (Kafka's ``configSynonyms``); a config's source is its
first synonym's, DEFAULT_CONFIG without one. A sensitive value (``ssl.keystore.key``) is None
in the entry and its synonyms. ``read_only``: every broker config but the dynamic ones.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

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
from quorum.metadata.image import MetadataImage, TopicImage
from quorum.metadata.records import ConfigResourceType

__all__ = [
    "CONFIG_SOURCE_DEFAULT",
    "CONFIG_SOURCE_DYNAMIC_BROKER",
    "CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER",
    "CONFIG_SOURCE_DYNAMIC_TOPIC",
    "CONFIG_SOURCE_STATIC_BROKER",
    "TOPIC_CONFIG_TYPES",
    "ConfigSynonym",
    "DescribeConfigsOutcome",
    "DescribedConfig",
    "Describer",
    "NodeConfigEntry",
    "describe_resource",
]

# Kafka's DescribeConfigsResponse.ConfigSource codes (ConfigEntry.ConfigSource's names).
CONFIG_SOURCE_DYNAMIC_TOPIC: Final = 1  # DYNAMIC_TOPIC_CONFIG
CONFIG_SOURCE_DYNAMIC_BROKER: Final = 2
CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER: Final = 3
CONFIG_SOURCE_STATIC_BROKER: Final = 4
CONFIG_SOURCE_DEFAULT: Final = 5

TOPIC_CONFIG_TYPES: Final = {
    "cleanup.policy": ConfigType.LIST,
    "delete.retention.ms": ConfigType.LONG,
    "min.cleanable.dirty.ratio": ConfigType.DOUBLE,
    "min.compaction.lag.ms": ConfigType.LONG,
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


@dataclass(frozen=True, slots=True)
class NodeConfigEntry:
    """One key of a broker's own configuration (``broker/node_configs.py`` makes them)."""

    name: str
    value: str | None
    """Kafka's string form; None: no value (a key without default) or sensitive."""
    given: bool
    """The file, the environment or an override gave it (else the default)."""
    config_type: int
    sensitive: bool
    doc: str


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: int


@dataclass(frozen=True, slots=True)
class DescribedConfig:
    """One entry of a DescribeConfigs answer (Kafka's ``DescribeConfigsResourceResult``)."""

    name: str
    value: str | None
    source: int
    read_only: bool
    sensitive: bool
    synonyms: tuple[ConfigSynonym, ...]
    config_type: int
    documentation: str | None


@dataclass(frozen=True, slots=True)
class _Levels:
    """The broker configs of each level, by Kafka name (Kafka's ``DynamicBrokerConfig``
    maps): the broker's dynamic ones, the cluster-wide dynamic ones, its file's, the
    defaults."""

    dynamic_broker: Mapping[str, str]
    dynamic_default: Mapping[str, str]
    static: Mapping[str, str]
    static_default: Mapping[str, str]

    def synonyms(self, name: str, sensitive: bool) -> list[ConfigSynonym]:
        """Kafka's ``configSynonyms(name, brokerConfigSynonyms(name))``."""
        names = BROKER_CONFIG_SYNONYMS.get(name, (name,))
        found = [
            ConfigSynonym(synonym, None if sensitive else level[synonym], source)
            for level, source in (
                (self.dynamic_broker, CONFIG_SOURCE_DYNAMIC_BROKER),
                (self.dynamic_default, CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER),
                (self.static, CONFIG_SOURCE_STATIC_BROKER),
                (self.static_default, CONFIG_SOURCE_DEFAULT),
            )
            for synonym in names
            if synonym in level
        ]
        while found and found[0].name != name:
            found.pop(0)
        return found


class Describer:
    def __init__(self, broker_id: int | None, entries: Sequence[NodeConfigEntry]) -> None:
        """``broker_id``: the describing broker (None: a controller, which describes any broker
        from its image alone); ``entries``: that broker's configuration (empty: not known)."""
        self._broker_id = broker_id
        self._entries = {e.name: e for e in entries}
        # A sensitive value is never kept here: its synonym says only that the file set it.
        self._static: dict[str, str] = {}
        for e in entries:
            if e.given and (e.value is not None or e.sensitive):
                self._static[e.name] = e.value if e.value is not None else ""
        defaults = {
            name: config.default
            for name, config in DYNAMIC_BROKER_CONFIGS.items()
            if config.default is not None
        }
        for e in entries:
            if e.value is not None and not e.given and e.name not in DYNAMIC_BROKER_CONFIGS:
                defaults[e.name] = e.value
        self._static_default: Mapping[str, str] = defaults

    def _levels(self, image: MetadataImage, broker_id: int | None) -> _Levels:
        return _Levels(
            image.broker_configs.get(str(broker_id), {}) if broker_id is not None else {},
            image.cluster_configs,
            self._static,
            self._static_default,
        )

    def topic(
        self, image: MetadataImage, topic: TopicImage, keys: Collection[str] | None
    ) -> list[DescribedConfig]:
        """The configs of ``topic`` (those in ``keys``; None: all) on the describing broker
        (on a controller: with no broker's dynamic value, only the cluster-wide ones)."""
        broker_id = self._broker_id
        levels = self._levels(image, broker_id)
        merged = merged_broker_configs(
            image.broker_configs, -1 if broker_id is None else broker_id, self._static
        )
        defaults = topic_defaults(merged)
        described = []
        for key in sorted(set(TOPIC_CONFIG_DEFAULTS) | set(topic.configs)):
            if keys is not None and key not in keys:
                continue
            broker_name = TOPIC_CONFIG_SYNONYM.get(key)
            synonyms = [] if broker_name is None else levels.synonyms(broker_name, False)
            value = topic.configs.get(key)
            if value is not None:
                synonyms.insert(0, ConfigSynonym(key, value, CONFIG_SOURCE_DYNAMIC_TOPIC))
            else:
                value = defaults.get(key, TOPIC_CONFIG_DEFAULTS.get(key))
            described.append(
                DescribedConfig(
                    key,
                    value,
                    synonyms[0].source if synonyms else CONFIG_SOURCE_DEFAULT,
                    False,
                    False,
                    tuple(synonyms),
                    TOPIC_CONFIG_TYPES.get(key, ConfigType.STRING),
                    None,
                )
            )
        return described

    def broker(
        self, image: MetadataImage, name: str, keys: Collection[str] | None
    ) -> list[DescribedConfig] | tuple[ErrorCode, str]:
        """The configs of broker resource ``name`` (those in ``keys``; None: all), or the
        refusal (INVALID_REQUEST)."""
        if not name:
            # Kafka: only the cluster-wide defaults that are set, with only their own synonyms.
            levels = self._levels(image, None)
            return [
                self._entry(levels, key, value, per_broker=False)
                for key, value in sorted(image.cluster_configs.items())
                if keys is None or key in keys
            ]
        digits = name[1:] if name[:1] == "-" else name
        if not (digits.isascii() and digits.isdigit()):
            return ErrorCode.INVALID_REQUEST, f"Broker id must be an integer, but it is: {name}"
        broker_id = int(name)
        if self._broker_id is not None and broker_id != self._broker_id:
            return (
                ErrorCode.INVALID_REQUEST,
                f"Unexpected broker id, expected {self._broker_id} or empty string, but "
                f"received {name}: ask broker {name} itself (Kafka's clients do)",
            )
        levels = self._levels(image, broker_id)
        merged = merged_broker_configs(image.broker_configs, broker_id, self._static)
        values: dict[str, str | None] = {e.name: e.value for e in self._entries.values()}
        for key, config in DYNAMIC_BROKER_CONFIGS.items():
            values[key] = merged.get(key, config.default)
        return [
            self._entry(levels, key, value, per_broker=True)
            for key, value in sorted(values.items())
            if keys is None or key in keys
        ]

    def _entry(
        self, levels: _Levels, key: str, value: str | None, *, per_broker: bool
    ) -> DescribedConfig:
        entry = self._entries.get(key)
        dynamic = DYNAMIC_BROKER_CONFIGS.get(key)
        sensitive = entry is not None and entry.sensitive
        synonyms = levels.synonyms(key, sensitive)
        if not per_broker:
            synonyms = [s for s in synonyms if s.source == CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER]
        if dynamic is not None:
            config_type = dynamic.config_type
        else:
            config_type = entry.config_type if entry is not None else ConfigType.UNKNOWN
        return DescribedConfig(
            key,
            None if sensitive else value,
            synonyms[0].source if synonyms else CONFIG_SOURCE_DEFAULT,
            dynamic is None,
            sensitive,
            tuple(synonyms),
            config_type,
            entry.doc if entry is not None else None,
        )


@dataclass(frozen=True, slots=True)
class DescribeConfigsOutcome:
    """One resource's answer: its configs, or why not."""

    resource_type: int
    resource_name: str
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    configs: tuple[DescribedConfig, ...] = ()


def describe_resource(
    describer: Describer,
    image: MetadataImage,
    resource_type: int,
    name: str,
    keys: Collection[str] | None,
    *,
    allowed: Callable[[int, str], bool],
    denied: Callable[[str], str],
) -> DescribeConfigsOutcome:
    """One resource, authorized as Kafka's ``KafkaApis`` does: ``allowed(type, name)`` says
    whether the caller has DESCRIBE_CONFIGS on the topic (TOPIC) or on the cluster (BROKER),
    else TOPIC_ / CLUSTER_AUTHORIZATION_FAILED with ``denied(what)``; then
    INVALID_TOPIC_EXCEPTION, UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST (another broker, a
    name that is not an id, another resource type)."""

    def refused(code: ErrorCode, message: str) -> DescribeConfigsOutcome:
        return DescribeConfigsOutcome(resource_type, name, code, message)

    if resource_type == ConfigResourceType.TOPIC:
        if not allowed(resource_type, name):
            return refused(ErrorCode.TOPIC_AUTHORIZATION_FAILED, denied(f"topic {quote(name)}"))
        if legal_name_error(name) is not None:
            return refused(
                ErrorCode.INVALID_TOPIC_EXCEPTION, f"{quote(name)} is not a legal topic name"
            )
        topic = image.topic_by_name(name)
        if topic is None:
            return refused(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {quote(name)} does not exist"
            )
        return DescribeConfigsOutcome(
            resource_type, name, configs=tuple(describer.topic(image, topic, keys))
        )
    if resource_type == ConfigResourceType.BROKER:
        if not allowed(resource_type, name):
            return refused(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, denied("the cluster's configs"))
        answer = describer.broker(image, name, keys)
        if isinstance(answer, tuple):
            return refused(*answer)
        return DescribeConfigsOutcome(resource_type, name, configs=tuple(answer))
    return refused(
        ErrorCode.INVALID_REQUEST,
        f"Unsupported resource type: {resource_type} (described here: TOPIC "
        f"({ConfigResourceType.TOPIC}) and BROKER ({ConfigResourceType.BROKER}))",
    )
