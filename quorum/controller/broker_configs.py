"""Dynamic broker configs: which can change live, their validation, and how a broker resolves
a topic's config from them (Kafka's ``DynamicBrokerConfig`` and ``ServerTopicConfigSynonyms``).

A broker config is set in three places, each overriding the next, as Kafka's are merged:

1. per broker, dynamically: a ``ConfigRecord`` of resource BROKER named by the broker's id
   (``kafka-configs --entity-type brokers --entity-name 101``);
2. cluster-wide, dynamically: a ``ConfigRecord`` of resource BROKER with the empty name
   (``--entity-default``);
3. the broker's own config file (``quorum/config_keys.py``; ``STATIC_BROKER_CONFIG``);

and otherwise Kafka's default. The merge is by key, then synonyms resolve, as Kafka's
``KafkaConfig`` does: ``log.retention.ms`` wins over ``log.retention.minutes``, which wins over
``log.retention.hours``, at whatever level each was set (a static ``log.retention.ms`` beats a
dynamic ``log.retention.hours``, as in Kafka). A topic's own config beats all of these.

=====================================  ======  ==============  ========================
broker config                          type    Kafka default   topic config it defaults
=====================================  ======  ==============  ========================
``log.retention.ms``                   long    none            ``retention.ms``
``log.retention.minutes``              int     none            ``retention.ms`` (x 60000)
``log.retention.hours``                int     168             ``retention.ms`` (x 3.6e6)
``log.retention.bytes``                long    -1              ``retention.bytes``
``log.segment.bytes``                  int     1073741824      ``segment.bytes``
``min.insync.replicas``                int     1               ``min.insync.replicas``
``unclean.leader.election.enable``     bool    false           ``unclean.leader.election.
                                                               enable``
=====================================  ======  ==============  ========================

Any other key is refused for a BROKER resource with Kafka's INVALID_REQUEST "Cannot update
these configs dynamically" (Kafka also refuses its non-dynamic keys so: ``listeners``,
``node.id``, ``log.dirs``, ...); a bad value is INVALID_CONFIG naming the key and what it
accepts. A negative retention (ms, minutes or hours) means unlimited, as Kafka reads it.

``unclean.leader.election.enable`` is decided by the active controller, which reads the topic's
config, then the cluster-wide default, then its own file (``configs.
unclean_leader_election_enabled``): a per-broker value is stored and described but decides
nothing (Kafka's controller reads its own node's resource, not a broker's). Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from quorum.controller.configs import (
    CONFIG_MIN_INSYNC_REPLICAS,
    CONFIG_UNCLEAN_LEADER_ELECTION_ENABLE,
    INT64_MAX,
    TOPIC_CONFIG_DEFAULTS,
    config_boolean,
    config_integer,
)
from quorum.limits import INT32_MAX

__all__ = [
    "BROKER_CONFIG_SYNONYMS",
    "DYNAMIC_BROKER_CONFIGS",
    "LOG_RETENTION_HOURS",
    "LOG_RETENTION_MINUTES",
    "LOG_RETENTION_MS",
    "TOPIC_CONFIG_SYNONYM",
    "ConfigType",
    "DynamicBrokerConfig",
    "merged_broker_configs",
    "topic_defaults",
]

LOG_RETENTION_MS: Final = "log.retention.ms"
LOG_RETENTION_MINUTES: Final = "log.retention.minutes"
LOG_RETENTION_HOURS: Final = "log.retention.hours"
LOG_RETENTION_BYTES: Final = "log.retention.bytes"
LOG_SEGMENT_BYTES: Final = "log.segment.bytes"


class ConfigType:
    """Kafka's ``DescribeConfigsResponse.ConfigType`` codes."""

    UNKNOWN: Final = 0
    BOOLEAN: Final = 1
    STRING: Final = 2
    INT: Final = 3
    SHORT: Final = 4
    LONG: Final = 5
    DOUBLE: Final = 6
    LIST: Final = 7
    CLASS: Final = 8
    PASSWORD: Final = 9


@dataclass(frozen=True, slots=True)
class DynamicBrokerConfig:
    """One broker config that can change live: its Kafka type and default (None: no default,
    the value is null until set), and its parser (normalised value, or ``ValueError`` saying
    what is accepted)."""

    name: str
    config_type: int
    default: str | None
    parse: Callable[[str], str]


def _int(minimum: int, maximum: int, kind: str) -> Callable[[str], str]:
    return lambda text: config_integer(text, minimum, maximum, kind)


DYNAMIC_BROKER_CONFIGS: Final[Mapping[str, DynamicBrokerConfig]] = {
    c.name: c
    for c in (
        DynamicBrokerConfig(LOG_RETENTION_MS, ConfigType.LONG, None, _int(-1, INT64_MAX, "a long")),
        DynamicBrokerConfig(
            LOG_RETENTION_MINUTES, ConfigType.INT, None, _int(-1, INT32_MAX, "an int")
        ),
        DynamicBrokerConfig(
            LOG_RETENTION_HOURS, ConfigType.INT, "168", _int(-1, INT32_MAX, "an int")
        ),
        DynamicBrokerConfig(
            LOG_RETENTION_BYTES,
            ConfigType.LONG,
            TOPIC_CONFIG_DEFAULTS["retention.bytes"],
            _int(-1, INT64_MAX, "a long"),
        ),
        DynamicBrokerConfig(
            LOG_SEGMENT_BYTES,
            ConfigType.INT,
            TOPIC_CONFIG_DEFAULTS["segment.bytes"],
            _int(14, INT32_MAX, "an int"),
        ),
        DynamicBrokerConfig(
            CONFIG_MIN_INSYNC_REPLICAS,
            ConfigType.INT,
            TOPIC_CONFIG_DEFAULTS[CONFIG_MIN_INSYNC_REPLICAS],
            _int(1, INT32_MAX, "an int"),
        ),
        DynamicBrokerConfig(
            CONFIG_UNCLEAN_LEADER_ELECTION_ENABLE,
            ConfigType.BOOLEAN,
            TOPIC_CONFIG_DEFAULTS[CONFIG_UNCLEAN_LEADER_ELECTION_ENABLE],
            config_boolean,
        ),
    )
}
"""The broker configs IncrementalAlterConfigs / AlterConfigs may set on a BROKER resource."""

BROKER_CONFIG_SYNONYMS: Final[Mapping[str, tuple[str, ...]]] = {
    name: (
        (LOG_RETENTION_MS, LOG_RETENTION_MINUTES, LOG_RETENTION_HOURS)
        if name in (LOG_RETENTION_MS, LOG_RETENTION_MINUTES, LOG_RETENTION_HOURS)
        else (name,)
    )
    for name in DYNAMIC_BROKER_CONFIGS
}
"""Kafka's ``brokerConfigSynonyms``: the keys that set the same thing, the winning one first."""

TOPIC_CONFIG_SYNONYM: Final[Mapping[str, str]] = {
    "retention.ms": LOG_RETENTION_MS,
    "retention.bytes": LOG_RETENTION_BYTES,
    "segment.bytes": LOG_SEGMENT_BYTES,
    CONFIG_MIN_INSYNC_REPLICAS: CONFIG_MIN_INSYNC_REPLICAS,
    CONFIG_UNCLEAN_LEADER_ELECTION_ENABLE: CONFIG_UNCLEAN_LEADER_ELECTION_ENABLE,
}
"""Topic config -> the broker config that is its default here (Kafka's
``ServerTopicConfigSynonyms``, for the broker configs that are dynamic here)."""

assert set(TOPIC_CONFIG_SYNONYM.values()) <= set(DYNAMIC_BROKER_CONFIGS)
assert set(TOPIC_CONFIG_SYNONYM) <= set(TOPIC_CONFIG_DEFAULTS)

_MS_PER: Final = {
    LOG_RETENTION_MS: 1,
    LOG_RETENTION_MINUTES: 60_000,
    LOG_RETENTION_HOURS: 3_600_000,
}


def merged_broker_configs(
    broker_configs: Mapping[str, Mapping[str, str]],
    broker_id: int,
    static: Mapping[str, str],
) -> dict[str, str]:
    """The dynamic broker configs in force on ``broker_id``, by key: its own dynamic value,
    else the cluster-wide one, else ``static`` (its file's, only the keys it gave)."""
    merged = {k: v for k, v in static.items() if k in DYNAMIC_BROKER_CONFIGS}
    merged.update(broker_configs.get("", {}))
    merged.update(broker_configs.get(str(broker_id), {}))
    return merged


def topic_defaults(merged: Mapping[str, str]) -> dict[str, str]:
    """What a topic that does not set a config gets on a broker whose broker configs in force
    are ``merged`` (``merged_broker_configs``): topic config -> value, for the topic configs
    that have a broker synonym (the others keep ``TOPIC_CONFIG_DEFAULTS``)."""
    defaults: dict[str, str] = {}
    for topic_name, broker_name in TOPIC_CONFIG_SYNONYM.items():
        if topic_name == "retention.ms":
            defaults[topic_name] = str(_retention_ms(merged))
        else:
            value = merged.get(broker_name, DYNAMIC_BROKER_CONFIGS[broker_name].default)
            assert value is not None
            defaults[topic_name] = value
    return defaults


def _retention_ms(merged: Mapping[str, str]) -> int:
    """Kafka's ``logRetentionTimeMillis``: ms, else minutes, else hours (168 by default);
    negative: unlimited (-1)."""
    for name in BROKER_CONFIG_SYNONYMS[LOG_RETENTION_MS]:
        value = merged.get(name, DYNAMIC_BROKER_CONFIGS[name].default)
        if value is not None:
            millis = int(value) * _MS_PER[name]
            return -1 if millis < 0 else min(millis, INT64_MAX)
    raise AssertionError("log.retention.hours has a default")
