"""Client quota records: Kafka's ``ClientQuotaRecord`` (KIP-631 type 14), one quota key of one
client quota entity set or removed (docs/kafka-listener.md#client-quotas).

An entity is a list of ``(entity_type, entity_name)`` pairs, ``entity_type`` one of ``user``,
``client-id`` (Kafka's ``ClientQuotaEntity``), ``entity_name`` None for the entity type's
default. ``value`` is a float as in Kafka's schema (``producer_byte_rate`` holds whole numbers);
``remove`` True removes ``key`` from the entity and ``value`` is then 0.0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from quorum.metadata.record_fields import (
    InvalidRecordError,
    check_bool,
    check_optional_str,
    check_str,
    fail_field,
    tuple_from_wire,
)

__all__ = [
    "ClientQuotaEntityData",
    "ClientQuotaRecord",
    "client_quota_from_wire",
    "client_quota_to_wire",
]


@dataclass(frozen=True, slots=True)
class ClientQuotaEntityData:
    """One component of a client quota entity (Kafka's ``ClientQuotaRecord.EntityData``)."""

    entity_type: str
    entity_name: str | None

    def __post_init__(self) -> None:
        check_str(self, "entity_type", self.entity_type)
        check_optional_str(self, "entity_name", self.entity_name)


@dataclass(frozen=True, slots=True)
class ClientQuotaRecord:
    entity: tuple[ClientQuotaEntityData, ...]
    key: str
    value: float
    remove: bool

    TYPE: ClassVar[int] = 14
    VERSION: ClassVar[int] = 0

    def __post_init__(self) -> None:
        if type(self.entity) is not tuple or not all(
            type(e) is ClientQuotaEntityData for e in self.entity
        ):
            fail_field(self, "entity", "a tuple of ClientQuotaEntityData", self.entity)
        check_str(self, "key", self.key)
        if type(self.value) is not float or not math.isfinite(self.value):
            fail_field(self, "value", "a finite float", self.value)
        check_bool(self, "remove", self.remove)


# ----- wire form --------------------------------------------------------------------------


def client_quota_to_wire(r: ClientQuotaRecord) -> list[object]:
    return [[[e.entity_type, e.entity_name] for e in r.entity], r.key, r.value, r.remove]


def _entity_from_wire(value: object) -> ClientQuotaEntityData:
    pair = tuple_from_wire(value)
    if len(pair) != 2:
        raise InvalidRecordError(f"an entity is [entity_type, entity_name], got {value!r}")
    return ClientQuotaEntityData(pair[0], pair[1])


def client_quota_from_wire(f: Sequence[Any]) -> ClientQuotaRecord:
    entity = tuple(_entity_from_wire(e) for e in tuple_from_wire(f[0]))
    return ClientQuotaRecord(entity, f[1], f[2], f[3])
