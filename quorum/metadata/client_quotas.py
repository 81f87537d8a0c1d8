"""Client quotas as Kafka's KRaft keeps them: entities, their validation, DescribeClientQuotas'
filter over the image, and which quota applies to a request (Kafka's ``ClientQuotaManager``
precedence). Pure: shared by the controller, the brokers and the tools
(docs/kafka-listener.md#client-quotas).

An entity is a tuple of ``(entity_type, entity_name)`` pairs sorted by type, ``entity_type``
``user`` or ``client-id`` (Kafka's ``ClientQuotaEntity``), a None name the type's default.
Kafka's third type, ``ip`` (``connection_creation_rate``), is not served: asking for it is
INVALID_REQUEST naming what is.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, TypeAlias

from quorum.metadata.records_quotas import ClientQuotaEntityData

__all__ = [
    "CLIENT_ID",
    "CONSUMER_BYTE_RATE",
    "ENTITY_TYPES",
    "IP",
    "LONG_KEYS",
    "MATCH_TYPE_DEFAULT",
    "MATCH_TYPE_EXACT",
    "MATCH_TYPE_SPECIFIED",
    "PRODUCER_BYTE_RATE",
    "QUOTA_KEYS",
    "REQUEST_PERCENTAGE",
    "ClientQuotaEntity",
    "DescribeFilterError",
    "QuotaMatch",
    "client_quota_entity_problem",
    "describe_client_quotas",
    "entity_key",
    "entity_text",
    "quota_for",
    "quota_value_problem",
]

ClientQuotaEntity: TypeAlias = tuple[tuple[str, str | None], ...]

USER: Final = "user"
CLIENT_ID: Final = "client-id"
IP: Final = "ip"
ENTITY_TYPES: Final = (USER, CLIENT_ID)  # served; Kafka's "ip" is not

PRODUCER_BYTE_RATE: Final = "producer_byte_rate"
CONSUMER_BYTE_RATE: Final = "consumer_byte_rate"
REQUEST_PERCENTAGE: Final = "request_percentage"
CONTROLLER_MUTATION_RATE: Final = "controller_mutation_rate"
# The keys served for users and clients (Kafka's QuotaConfigs.userConfigs / clientConfigs,
# without controller_mutation_rate, which nothing here would enforce).
QUOTA_KEYS: Final = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)
# Kafka's LONG-typed keys: their value must be a whole number.
LONG_KEYS: Final = frozenset({PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE})

# DescribeClientQuotas' match types (Kafka's DescribeClientQuotasRequest).
MATCH_TYPE_EXACT: Final = 0
MATCH_TYPE_DEFAULT: Final = 1
MATCH_TYPE_SPECIFIED: Final = 2


def entity_key(entity: Iterable[ClientQuotaEntityData]) -> ClientQuotaEntity:
    """The image's key of an entity: its pairs sorted by type."""
    return tuple(sorted((e.entity_type, e.entity_name) for e in entity))


def entity_text(entity: ClientQuotaEntity) -> str:
    """``user=alice, client-id=<default>``, for messages and the CLI."""
    return (
        ", ".join(
            f"{kind}={'<default>' if name is None else name}" for kind, name in sorted(entity)
        )
        or "<empty>"
    )


def client_quota_entity_problem(entity: Sequence[ClientQuotaEntityData]) -> str | None:
    """Why ``entity`` is not one a quota can be set on (Kafka's ``validateEntity`` and
    ``configKeysForEntityType`` messages, INVALID_REQUEST), or None."""
    if not entity:
        return "Invalid empty client quota entity"
    seen: set[str] = set()
    for component in entity:
        kind = component.entity_type
        if kind in seen:
            return f"Invalid empty client quota entity, duplicate entity entry {kind}"
        seen.add(kind)
        if kind == IP:
            return (
                "Entity type ip (connection_creation_rate) is not supported by this cluster: "
                f"the supported entity types are {', '.join(ENTITY_TYPES)}"
            )
        if kind not in ENTITY_TYPES:
            return (
                f"Unhandled client quota entity type: {kind} (the supported entity types are "
                f"{', '.join(ENTITY_TYPES)})"
            )
        if component.entity_name is not None and not component.entity_name:
            return f"Empty {kind} not supported"
    return None


def quota_value_problem(key: str, value: float) -> str | None:
    """Why ``value`` cannot be quota ``key`` (INVALID_REQUEST), or None. Kafka's rules (a known
    key, a whole number for a LONG key) and, beyond Kafka, a finite value above 0: a quota of 0
    or below would throttle its clients forever."""
    if key == CONTROLLER_MUTATION_RATE:
        return (
            f"Configuration {key} is not supported by this cluster: the supported keys are "
            f"{', '.join(QUOTA_KEYS)}"
        )
    if key not in QUOTA_KEYS:
        return f"Invalid configuration key {key} (the supported keys are {', '.join(QUOTA_KEYS)})"
    if not math.isfinite(value):
        return f"Configuration {key} must be a finite number, got {value}"
    if key in LONG_KEYS:
        epsilon = 1e-6
        if abs(float(int(value + epsilon)) - value) > epsilon:
            return f"Configuration {key} must be a Long value"
    if value <= 0:
        return f"Configuration {key} must be above 0, got {value:g}"
    return None


# ----- DescribeClientQuotas -----------------------------------------------------------------


class DescribeFilterError(ValueError):
    """A filter DescribeClientQuotas refuses; ``unsupported``: UNSUPPORTED_VERSION (an entity
    type Kafka does not know), else INVALID_REQUEST."""

    def __init__(self, message: str, *, unsupported: bool = False) -> None:
        super().__init__(message)
        self.unsupported = unsupported


def describe_client_quotas(
    quotas: Mapping[ClientQuotaEntity, Mapping[str, float]],
    components: Sequence[tuple[str, int, str | None]],
    *,
    strict: bool,
) -> list[tuple[ClientQuotaEntity, dict[str, float]]]:
    """The entities of ``quotas`` the filter matches, with their quotas, sorted (Kafka's
    ``ClientQuotasImage.describe``). ``components``: ``(entity_type, match_type, match)``.
    Raises ``DescribeFilterError`` with Kafka's messages."""
    exact: dict[str, str | None] = {}
    specified: set[str] = set()
    for kind, match_type, match in components:
        if not kind:
            raise DescribeFilterError("Invalid empty entity type.")
        if kind in exact or kind in specified:
            raise DescribeFilterError(
                f"Entity type {kind} cannot appear more than once in the filter."
            )
        if kind not in (USER, CLIENT_ID, IP):
            raise DescribeFilterError(f"Unsupported entity type {kind}", unsupported=True)
        if match_type == MATCH_TYPE_EXACT:
            if match is None:
                raise DescribeFilterError(
                    "Request specified MATCH_TYPE_EXACT, but set match string to null."
                )
            exact[kind] = match
        elif match_type == MATCH_TYPE_DEFAULT:
            if match is not None:
                raise DescribeFilterError(
                    "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."
                )
            exact[kind] = None
        elif match_type == MATCH_TYPE_SPECIFIED:
            if match is not None:
                raise DescribeFilterError(
                    "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."
                )
            specified.add(kind)
        else:
            raise DescribeFilterError(
                f"Unknown match type {match_type} (0: exact, 1: default, 2: any specified)"
            )
    if (IP in exact or IP in specified) and ({USER, CLIENT_ID} & (exact.keys() | specified)):
        raise DescribeFilterError(
            "Invalid entity filter component combination. IP filter component should not be "
            "used with user or clientId filter component."
        )
    found = []
    for entity, values in quotas.items():
        names = dict(entity)
        if not all(kind in names and names[kind] == name for kind, name in exact.items()):
            continue
        if not all(kind in names for kind in specified):
            continue
        if not exact and not specified and strict:
            continue
        if strict and len(names) != len(exact) + len(specified):
            continue
        found.append((entity, dict(values)))
    found.sort(key=lambda item: [(k, "" if n is None else "\0" + n) for k, n in item[0]])
    return found


# ----- which quota applies ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QuotaMatch:
    """The quota a request is held to: its ``value``, the ``entity`` it was set on, and the
    ``bucket`` whose usage is measured against it (Kafka's metric tags: the request's user and
    client id where the entity names those types, so every client of a user-level quota shares
    one bucket, while a default entity gives each user or client one of its own)."""

    value: float
    entity: ClientQuotaEntity
    bucket: tuple[str, str]


def _precedence(user: str, client_id: str) -> tuple[ClientQuotaEntity, ...]:
    """Kafka's ``ClientQuotaManager`` order, most specific first."""
    return (
        ((CLIENT_ID, client_id), (USER, user)),
        ((CLIENT_ID, None), (USER, user)),
        ((USER, user),),
        ((CLIENT_ID, client_id), (USER, None)),
        ((CLIENT_ID, None), (USER, None)),
        ((USER, None),),
        ((CLIENT_ID, client_id),),
        ((CLIENT_ID, None),),
    )


def quota_for(
    quotas: Mapping[ClientQuotaEntity, Mapping[str, float]], user: str, client_id: str, key: str
) -> QuotaMatch | None:
    """The quota ``key`` that applies to ``user``'s client ``client_id``: the first entity in
    Kafka's precedence (user + client-id, user + default client-id, user, default user +
    client-id, default user + default client-id, default user, client-id, default client-id)
    that sets ``key``; None when none does."""
    if not quotas:
        return None
    for entity in _precedence(user, client_id):
        values = quotas.get(entity)
        if values is None or key not in values:
            continue
        kinds = dict(entity)
        bucket = (user if USER in kinds else "", client_id if CLIENT_ID in kinds else "")
        return QuotaMatch(values[key], entity, bucket)
    return None
