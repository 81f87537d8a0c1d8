"""DescribeConfigs (quorum/rpc/v1/admin.proto) to and from the dataclasses of
``quorum.controller.describe_configs``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from quorum.controller.describe_configs import (
    ConfigSynonym,
    DescribeConfigsOutcome,
    DescribedConfig,
)
from quorum.errors import ErrorCode
from quorum.rpc.v1 import admin_pb2

__all__ = ["add_describe_configs_outcome", "describe_configs_outcomes_from_proto"]


def add_describe_configs_outcome(results: Any, outcome: DescribeConfigsOutcome) -> None:
    """Append ``outcome`` to a ``DescribeConfigsResponse.results`` field."""
    result = results.add(
        resource_type=outcome.resource_type,
        resource_name=outcome.resource_name,
        error_code=int(outcome.error_code),
        error_message=outcome.error_message or "",
    )
    for config in outcome.configs:
        entry = result.configs.add(
            name=config.name,
            source=config.source,
            read_only=config.read_only,
            is_sensitive=config.sensitive,
            config_type=config.config_type,
            documentation=config.documentation or "",
        )
        if config.value is not None:
            entry.value = config.value
        for synonym in config.synonyms:
            added = entry.synonyms.add(name=synonym.name, source=synonym.source)
            if synonym.value is not None:
                added.value = synonym.value


def describe_configs_outcomes_from_proto(
    results: Iterable[admin_pb2.DescribeConfigsResult],
) -> list[DescribeConfigsOutcome]:
    return [
        DescribeConfigsOutcome(
            r.resource_type,
            r.resource_name,
            ErrorCode(r.error_code),
            r.error_message or None,
            tuple(
                DescribedConfig(
                    c.name,
                    c.value if c.HasField("value") else None,
                    c.source,
                    c.read_only,
                    c.is_sensitive,
                    tuple(
                        ConfigSynonym(s.name, s.value if s.HasField("value") else None, s.source)
                        for s in c.synonyms
                    ),
                    c.config_type,
                    c.documentation or None,
                )
                for c in r.configs
            ),
        )
        for r in results
    ]
