"""A broker's own configuration as Kafka's DescribeConfigs reports it: every key of the node
config (``quorum/config_keys.py``) in Kafka's string form, with its type and flags, and which
of them the file gave (``STATIC_BROKER_CONFIG``) rather than left at the default
(``DEFAULT_CONFIG``). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Final

from quorum.config import NodeConfig
from quorum.config_keys import KEYS, SPECS
from quorum.controller.broker_configs import DYNAMIC_BROKER_CONFIGS, ConfigType
from quorum.controller.describe_configs import NodeConfigEntry
from quorum.limits import INT32_MAX

__all__ = ["SENSITIVE_NODE_CONFIGS", "node_config_entries", "static_configs"]

SENSITIVE_NODE_CONFIGS: Final = frozenset({"ssl.keystore.key"})
"""Keys whose value DescribeConfigs never shows (Kafka's type PASSWORD: ``ssl.keystore.key``,
like ``ssl.key.password``): answered with a null value, ``is_sensitive`` true."""


def _kafka_string(value: object) -> str | None:
    """Kafka's ``ConfigDef.convertToString``: booleans lower case, lists comma-separated."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return ",".join(f"{k}:{v}" for k, v in value.items())
    if isinstance(value, tuple | frozenset | list):
        items = sorted(value) if isinstance(value, frozenset) else value
        return ",".join(str(item) for item in items)
    if isinstance(value, Path):
        return str(value)
    return str(value)


def _config_type(name: str, value: object) -> int:
    if name in SENSITIVE_NODE_CONFIGS:
        return ConfigType.PASSWORD
    dynamic = DYNAMIC_BROKER_CONFIGS.get(name)
    if dynamic is not None:
        return dynamic.config_type
    bounds = SPECS[name].kind.bounds
    if bounds is not None:
        return ConfigType.LONG if bounds[1] > INT32_MAX else ConfigType.INT
    if isinstance(value, bool):
        return ConfigType.BOOLEAN
    if isinstance(value, tuple | frozenset):
        return ConfigType.LIST
    return ConfigType.STRING


def node_config_entries(config: NodeConfig) -> list[NodeConfigEntry]:
    """Every key of ``config``, in the table's order."""
    attributes = {f.name for f in fields(NodeConfig)}
    entries = []
    for name, attribute in KEYS.items():
        assert attribute in attributes
        value = getattr(config, attribute)
        sensitive = name in SENSITIVE_NODE_CONFIGS
        entries.append(
            NodeConfigEntry(
                name,
                None if sensitive else _kafka_string(value),
                name in config.given_keys,
                _config_type(name, value),
                sensitive,
                SPECS[name].doc,
            )
        )
    return entries


def static_configs(config: NodeConfig) -> dict[str, str]:
    """The dynamic broker configs the file gave (Kafka's ``staticBrokerConfigs`` for them)."""
    return {
        entry.name: entry.value
        for entry in node_config_entries(config)
        if entry.given and entry.name in DYNAMIC_BROKER_CONFIGS and entry.value is not None
    }
