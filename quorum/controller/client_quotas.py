"""AlterClientQuotas: validate, return ``ClientQuotaRecord``s (Kafka's
``ClientQuotaControlManager.alterClientQuotas``; docs/kafka-listener.md#client-quotas).

Pure, as every operation (docs/conventions.md#propose-and-replay): the image changes only when
the records are replayed. Per entry, Kafka's rules and messages, all INVALID_REQUEST:

- the entity: not empty, each type once, ``user`` or ``client-id`` (Kafka's ``ip`` is not
  served: the message names what is), a name None (the default) or not empty;
- each op: its key named once in the entry ("Duplicate quota key ..."), one of
  ``producer_byte_rate``, ``consumer_byte_rate``, ``request_percentage`` (Kafka's
  ``controller_mutation_rate`` is refused, naming those), a whole number for the two byte
  rates ("... must be a Long value"), and, beyond Kafka, finite and above 0;
- an entity named twice in one request: "Ignoring duplicate entity ..." for the second.

An entry with any bad op changes nothing (Kafka writes the valid ops of such an entry and still
answers NONE; we refuse the entry whole, so an answer never hides a change). A removal of a key
the entity does not have writes nothing, as does setting the value it already has. The records
of one request are one atomic batch; ``validate_only`` answers the same and writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from quorum.controller.result import ControllerResult
from quorum.errors import ErrorCode
from quorum.metadata.client_quotas import (
    ClientQuotaEntity,
    client_quota_entity_problem,
    entity_key,
    entity_text,
    quota_value_problem,
)
from quorum.metadata.image import MetadataImage
from quorum.metadata.records import ClientQuotaEntityData, ClientQuotaRecord, MetadataRecord

__all__ = [
    "CLIENT_QUOTA_ENTITIES_MAX",
    "CLIENT_QUOTA_ENTITY_NAME_CHARS_MAX",
    "AlterClientQuotasEntry",
    "AlterClientQuotasRequest",
    "AlterClientQuotasResponse",
    "AlterClientQuotasResult",
    "alter_client_quotas",
]

# Entries of one AlterClientQuotas; our choice (Kafka has none), as for AlterConfigs'
# resources: with at most three keys each, one request's records (3,000) fit in one batch.
CLIENT_QUOTA_ENTITIES_MAX: Final = 1_000
# An entity name's length; our choice (Kafka has none): 3,000 records naming two entities of
# this length stay well within one batch's bytes (limits.BATCH_BYTES_MAX).
CLIENT_QUOTA_ENTITY_NAME_CHARS_MAX: Final = 1_024


@dataclass(frozen=True, slots=True)
class AlterClientQuotasEntry:
    """One entity and its ops: ``(key, value)``, a None value removes the key."""

    entity: tuple[ClientQuotaEntityData, ...]
    ops: tuple[tuple[str, float | None], ...]


@dataclass(frozen=True, slots=True)
class AlterClientQuotasRequest:
    entries: tuple[AlterClientQuotasEntry, ...]
    validate_only: bool = False


@dataclass(frozen=True, slots=True)
class AlterClientQuotasResult:
    entity: tuple[ClientQuotaEntityData, ...]
    error_code: ErrorCode
    error_message: str | None


@dataclass(frozen=True, slots=True)
class AlterClientQuotasResponse:
    results: tuple[AlterClientQuotasResult, ...]


def _entry_problem(
    entry: AlterClientQuotasEntry, current: dict[str, float], records: list[MetadataRecord]
) -> str | None:
    """Why ``entry`` is refused (INVALID_REQUEST), else None with its records added."""
    problem = client_quota_entity_problem(entry.entity)
    if problem is not None:
        return problem
    for component in entry.entity:
        name = component.entity_name
        if name is not None and len(name) > CLIENT_QUOTA_ENTITY_NAME_CHARS_MAX:
            return (
                f"{component.entity_type} name of {len(name)} characters: at most "
                f"{CLIENT_QUOTA_ENTITY_NAME_CHARS_MAX} are allowed"
            )
    shown = entity_text(entity_key(entry.entity))
    seen: set[str] = set()
    for key, value in entry.ops:
        if key in seen:
            return f"Duplicate quota key {key} not updating quota for this entity {shown}"
        seen.add(key)
        if value is not None:
            problem = quota_value_problem(key, value)
            if problem is not None:
                return problem
    found: list[MetadataRecord] = []
    for key, value in entry.ops:
        if value is None:
            if key in current:
                found.append(ClientQuotaRecord(entry.entity, key, 0.0, remove=True))
        elif current.get(key) != value:
            found.append(ClientQuotaRecord(entry.entity, key, float(value), remove=False))
    records.extend(found)
    return None


def alter_client_quotas(
    image: MetadataImage, request: AlterClientQuotasRequest
) -> ControllerResult[AlterClientQuotasResponse]:
    """Kafka's AlterClientQuotas against ``image`` (see the module docstring)."""
    records: list[MetadataRecord] = []
    results: list[AlterClientQuotasResult] = []
    seen: set[ClientQuotaEntity] = set()
    for entry in request.entries:
        key = entity_key(entry.entity)
        if key in seen:
            results.append(
                AlterClientQuotasResult(
                    entry.entity,
                    ErrorCode.INVALID_REQUEST,
                    f"Ignoring duplicate entity {entity_text(key)}",
                )
            )
            continue
        seen.add(key)
        current = dict(image.client_quotas.get(key, {}))
        problem = _entry_problem(entry, current, records)
        if problem is None:
            results.append(AlterClientQuotasResult(entry.entity, ErrorCode.NONE, None))
        else:
            results.append(
                AlterClientQuotasResult(entry.entity, ErrorCode.INVALID_REQUEST, problem)
            )
    response = AlterClientQuotasResponse(tuple(results))
    if request.validate_only:
        return ControllerResult((), response)
    return ControllerResult(tuple(records), response)
