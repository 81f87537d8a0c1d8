"""IncrementalAlterConfigs and AlterConfigs: validate, return ConfigRecords.

TOPIC resources, and BROKER resources: one broker's dynamic configs (named by its id, Kafka's
``kafka-configs --entity-type brokers --entity-name 101``) or the cluster-wide default (the
empty name, ``--entity-default``), for the broker configs that change live
(``broker_configs.DYNAMIC_BROKER_CONFIGS``: retention, segment size, ``min.insync.replicas``,
``unclean.leader.election.enable``).

A pure function of (image, request), as ``topics.create_topics``: it never mutates the image;
the ``ConfigRecord``s it returns change it only when replayed. A set config is a
``ConfigRecord`` with the normalised value, a deleted one a ``ConfigRecord`` with a null value
(Kafka's representation; the image then drops the key). Only changes are recorded: setting a
config to the value it has, or deleting one that is not set, writes nothing.

Per resource, in this order (the first failing check decides the code):

===================================  =============================  ===========================
check                                code                           note
===================================  =============================  ===========================
resource named twice in the request  INVALID_REQUEST (each)         Kafka: duplicate resource
resource type not TOPIC or BROKER    INVALID_REQUEST
BROKER named other than by an id     INVALID_REQUEST                Kafka: invalid broker name
no live topic of that name           UNKNOWN_TOPIC_OR_PARTITION
a key given twice for the resource   INVALID_REQUEST                Kafka's message
BROKER: a key that is not dynamic    INVALID_REQUEST                Kafka: "Cannot update these
here (``listeners``, ``node.id``)                                   configs dynamically"
an op other than SET/DELETE/APPEND/  INVALID_REQUEST
SUBTRACT
APPEND / SUBTRACT on a key that is   INVALID_REQUEST                only ``cleanup.policy`` is
not list-typed                                                      a list
``internal``                         INVALID_CONFIG                 fixed at creation (KIP-619)
unknown name, bad or null value      INVALID_CONFIG                 as CreateTopics
                                                                    (``configs``)
``min.insync.replicas`` above the    INVALID_CONFIG                 as CreateTopics
replication factor
===================================  =============================  ===========================

AlterConfigs (the legacy API, key 33) replaces a resource's whole set: the given configs are set,
every other set config is deleted. IncrementalAlterConfigs (key 44) applies SET, DELETE,
APPEND (add list items not present, starting from the current value or the default) and
SUBTRACT (remove list items). Authorization (ALTER_CONFIGS on the topic,
TOPIC_AUTHORIZATION_FAILED; on the cluster for a BROKER resource, CLUSTER_AUTHORIZATION_FAILED)
is checked before, by the caller. ``validate_only``: the same
answers, no records. All records of a request go in one atomic batch.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass
from typing import Final

from quorum.controller.broker_configs import DYNAMIC_BROKER_CONFIGS
from quorum.controller.configs import (
    CONFIG_INTERNAL,
    CONFIG_MIN_INSYNC_REPLICAS,
    SUPPORTED_TOPIC_CONFIGS,
    TOPIC_CONFIG_DEFAULTS,
    validate_topic_configs,
)
from quorum.controller.names import quote
from quorum.controller.result import ControllerResult
from quorum.errors import ErrorCode
from quorum.limits import INT32_MAX, TOPIC_CONFIG_VALUE_CHARS_MAX
from quorum.metadata.image import MetadataImage
from quorum.metadata.records import ConfigRecord, ConfigResourceType, MetadataRecord

__all__ = [
    "LIST_TYPED_TOPIC_CONFIGS",
    "SUPPORTED_CLUSTER_CONFIGS",
    "AlterConfigOp",
    "AlterConfigsRequest",
    "AlterConfigsResource",
    "AlterConfigsResponse",
    "AlterConfigsResult",
    "AlterableConfig",
    "alter_configs",
]

SUPPORTED_CLUSTER_CONFIGS: Final = frozenset(DYNAMIC_BROKER_CONFIGS)
"""The broker configs a BROKER resource (one broker's, or the cluster-wide default) may set
(``broker_configs.DYNAMIC_BROKER_CONFIGS``)."""

LIST_TYPED_TOPIC_CONFIGS = frozenset({"cleanup.policy"})
"""The supported topic configs of Kafka's type LIST: the only ones APPEND and SUBTRACT take."""


class AlterConfigOp(enum.IntEnum):
    """Kafka's ``AlterConfigOp.OpType`` codes."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True, slots=True)
class AlterableConfig:
    """One change as sent: ``op`` is the raw code (an unknown one is answered INVALID_REQUEST);
    ``value`` is ignored for DELETE."""

    name: str
    op: int
    value: str | None


@dataclass(frozen=True, slots=True)
class AlterConfigsResource:
    resource_type: int
    """Kafka's ``ConfigResource.Type`` code (``ConfigResourceType``)."""
    resource_name: str
    configs: tuple[AlterableConfig, ...]


@dataclass(frozen=True, slots=True)
class AlterConfigsRequest:
    """``incremental``: IncrementalAlterConfigs (ops as given); else AlterConfigs (every
    config SET, the rest of the resource's set deleted)."""

    resources: tuple[AlterConfigsResource, ...]
    validate_only: bool = False
    incremental: bool = True


@dataclass(frozen=True, slots=True)
class AlterConfigsResult:
    resource_type: int
    resource_name: str
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class AlterConfigsResponse:
    """One result per resource, in request order."""

    results: tuple[AlterConfigsResult, ...]


class _Refusal(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def alter_configs(
    image: MetadataImage, request: AlterConfigsRequest
) -> ControllerResult[AlterConfigsResponse]:
    """Validate every resource against ``image``; records for the accepted ones (none if
    ``validate_only``), and one result per resource."""
    counts = Counter((r.resource_type, r.resource_name) for r in request.resources)
    records: list[MetadataRecord] = []
    results: list[AlterConfigsResult] = []
    for resource in request.resources:
        try:
            if counts[(resource.resource_type, resource.resource_name)] > 1:
                raise _Refusal(
                    ErrorCode.INVALID_REQUEST,
                    f"Resource {quote(resource.resource_name)} of type "
                    f"{resource.resource_type} is named more than once; name each resource "
                    "at most once per request",
                )
            if resource.resource_type == ConfigResourceType.TOPIC:
                changes = _topic_changes(image, resource, incremental=request.incremental)
            elif resource.resource_type == ConfigResourceType.BROKER:
                changes = _broker_changes(image, resource, incremental=request.incremental)
            else:
                raise _Refusal(
                    ErrorCode.INVALID_REQUEST,
                    f"Resource type {resource.resource_type} cannot be altered here; only TOPIC "
                    f"({ConfigResourceType.TOPIC}) and BROKER ({ConfigResourceType.BROKER}: a "
                    "broker id, or empty for the cluster-wide default) resources are supported",
                )
        except _Refusal as refusal:
            results.append(
                AlterConfigsResult(
                    resource.resource_type, resource.resource_name, refusal.code, refusal.message
                )
            )
            continue
        results.append(AlterConfigsResult(resource.resource_type, resource.resource_name))
        if not request.validate_only:
            records.extend(
                ConfigRecord(resource.resource_type, resource.resource_name, key, value)
                for key, value in changes
            )
    return ControllerResult(tuple(records), AlterConfigsResponse(tuple(results)))


def _topic_changes(
    image: MetadataImage, resource: AlterConfigsResource, *, incremental: bool
) -> list[tuple[str, str | None]]:
    """The (key, new value or None) pairs that change the topic's configs, sorted by key."""
    topic = image.topic_by_name(resource.resource_name)
    if topic is None:
        raise _Refusal(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            f"Topic {quote(resource.resource_name)} does not exist",
        )
    _check_keys_once(resource)
    current = dict(topic.configs)
    wanted: dict[str, str | None] = {} if incremental else dict.fromkeys(current)
    sets: list[tuple[str, str | None]] = []
    for config in resource.configs:
        op = _op(config, incremental=incremental)
        if config.name == CONFIG_INTERNAL:
            raise _Refusal(
                ErrorCode.INVALID_CONFIG,
                f"Config {CONFIG_INTERNAL!r} is fixed when the topic is created (KIP-619) "
                "and cannot be altered",
            )
        if op in (AlterConfigOp.APPEND, AlterConfigOp.SUBTRACT):
            if config.name not in LIST_TYPED_TOPIC_CONFIGS:
                raise _Refusal(
                    ErrorCode.INVALID_REQUEST,
                    f"{AlterConfigOp(op).name} is only for list-typed configs "
                    f"({', '.join(sorted(LIST_TYPED_TOPIC_CONFIGS))}), not "
                    f"{quote(config.name)}; use SET or DELETE",
                )
            sets.append((config.name, _list_op(current, config, AlterConfigOp(op))))
        elif op == AlterConfigOp.DELETE:
            if config.name not in SUPPORTED_TOPIC_CONFIGS:
                supported = ", ".join(sorted(SUPPORTED_TOPIC_CONFIGS))
                raise _Refusal(
                    ErrorCode.INVALID_CONFIG,
                    f"Unknown topic config name: {quote(config.name)} (supported: {supported})",
                )
            wanted[config.name] = None
        else:
            sets.append((config.name, config.value))
    validated = validate_topic_configs(sets)
    if isinstance(validated, str):
        raise _Refusal(ErrorCode.INVALID_CONFIG, validated)
    wanted.update(validated.configs)
    min_isr = wanted.get(CONFIG_MIN_INSYNC_REPLICAS)
    replication_factor = topic.replication_factor
    if min_isr is not None and 0 < replication_factor < int(min_isr):
        raise _Refusal(
            ErrorCode.INVALID_CONFIG,
            f"{CONFIG_MIN_INSYNC_REPLICAS}={min_isr} is more than the replication factor "
            f"{replication_factor} of topic {quote(topic.name)}: writes with acks=all could "
            f"never succeed. Lower it to at most {replication_factor}",
        )
    return sorted((key, value) for key, value in wanted.items() if current.get(key) != value)


def _check_keys_once(resource: AlterConfigsResource) -> None:
    names = Counter(config.name for config in resource.configs)
    repeated = sorted(name for name, count in names.items() if count > 1)
    if repeated:
        raise _Refusal(
            ErrorCode.INVALID_REQUEST,
            f"Error due to duplicate config keys: {', '.join(quote(n) for n in repeated)}; "
            "give each key at most once per resource",
        )


def _op(config: AlterableConfig, *, incremental: bool) -> AlterConfigOp:
    if not incremental:
        return AlterConfigOp.SET
    if config.op not in tuple(AlterConfigOp):
        raise _Refusal(
            ErrorCode.INVALID_REQUEST,
            f"Unknown operation {config.op} for config {quote(config.name)}; use SET (0), "
            "DELETE (1), APPEND (2) or SUBTRACT (3)",
        )
    return AlterConfigOp(config.op)


def _broker_changes(
    image: MetadataImage, resource: AlterConfigsResource, *, incremental: bool
) -> list[tuple[str, str | None]]:
    """The changes of one broker's dynamic configs (named by its id) or of the cluster-wide
    default (the empty name), sorted by key (``broker_configs.DYNAMIC_BROKER_CONFIGS``). A
    broker need not be registered to be configured (as Kafka's)."""
    name = resource.resource_name
    # Canonical digits only: "007" would be stored apart from "7", where no broker reads it.
    if name and not (
        name.isascii() and name.isdigit() and str(int(name)) == name and int(name) <= INT32_MAX
    ):
        raise _Refusal(
            ErrorCode.INVALID_REQUEST,
            f"Invalid broker name {quote(name)}: a broker resource is named by a broker id "
            "(an integer, without leading zeros), or empty for the cluster-wide default",
        )
    _check_keys_once(resource)
    current = dict(image.broker_configs.get(name, {}))
    wanted: dict[str, str | None] = {} if incremental else dict.fromkeys(current)
    supported = ", ".join(sorted(DYNAMIC_BROKER_CONFIGS))
    fixed = sorted({c.name for c in resource.configs} - set(DYNAMIC_BROKER_CONFIGS))
    if fixed:
        raise _Refusal(
            ErrorCode.INVALID_REQUEST,
            f"Cannot update these configs dynamically: Set({', '.join(fixed)}); the broker "
            f"configs that can change live here: {supported} (others are read from the "
            "broker's config file at start)",
        )
    for config in resource.configs:
        op = _op(config, incremental=incremental)
        if op in (AlterConfigOp.APPEND, AlterConfigOp.SUBTRACT):
            raise _Refusal(
                ErrorCode.INVALID_REQUEST,
                f"{op.name} is only for list-typed configs, and no dynamic broker config "
                f"is one ({supported}); use SET or DELETE",
            )
        if op == AlterConfigOp.DELETE:
            wanted[config.name] = None
            continue
        if config.value is None:
            raise _Refusal(
                ErrorCode.INVALID_CONFIG,
                f"Null value not supported for broker configs: {config.name}",
            )
        if len(config.value) > TOPIC_CONFIG_VALUE_CHARS_MAX:
            raise _Refusal(
                ErrorCode.INVALID_CONFIG,
                f"Value of config {config.name!r} has {len(config.value)} characters; at most "
                f"{TOPIC_CONFIG_VALUE_CHARS_MAX} are allowed",
            )
        try:
            wanted[config.name] = DYNAMIC_BROKER_CONFIGS[config.name].parse(config.value)
        except ValueError as exc:
            raise _Refusal(
                ErrorCode.INVALID_CONFIG,
                f"Invalid value {quote(config.value)} for configuration {config.name}: {exc}",
            ) from None
    return sorted((key, value) for key, value in wanted.items() if current.get(key) != value)


def _list_op(current: dict[str, str], config: AlterableConfig, op: AlterConfigOp) -> str:
    """The list value after APPEND or SUBTRACT of ``config.value``'s comma-separated items,
    starting from the topic's value or, if unset, the default (as Kafka does)."""
    if config.value is None:
        raise _Refusal(
            ErrorCode.INVALID_CONFIG,
            f"Null value not supported for topic configs: {config.name}",
        )
    base = current.get(config.name, TOPIC_CONFIG_DEFAULTS.get(config.name, ""))
    items = [item.strip().lower() for item in base.split(",") if item.strip()]
    given = [item.strip().lower() for item in config.value.split(",") if item.strip()]
    if op == AlterConfigOp.APPEND:
        items.extend(item for item in given if item not in items)
    else:
        items = [item for item in items if item not in given]
    return ",".join(items)
