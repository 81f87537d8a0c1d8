"""``metaquorum configs --entity-type users|clients``: client quotas as Kafka's
``kafka-configs.sh`` handles them, over the AdminClient's ``alter_client_quotas`` and
``describe_client_quotas`` (docs/cli.md, docs/kafka-listener.md#client-quotas).

``--alter`` prints ``Completed updating config for user CN=alice.`` (``client app.``), or
``Completed updating default config for users in the cluster.`` with ``--entity-default``;
``--describe`` prints one line per entity, as Kafka's ConfigCommand::

    Quota configs for user-principal 'CN=alice' are producer_byte_rate=1024.0

with Java's text of a double (``1024.0``, ``1.0E7``). Without ``--entity-name`` or
``--entity-default``, ``--describe`` lists every entity of that type alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any, Final

from quorum.admin.types import AlterConfigOp
from quorum.controller.client_quotas import AlterClientQuotasEntry
from quorum.errors import AdminError, ErrorCode, error_for
from quorum.metadata.client_quotas import (
    CLIENT_ID,
    MATCH_TYPE_DEFAULT,
    MATCH_TYPE_EXACT,
    MATCH_TYPE_SPECIFIED,
    USER,
    ClientQuotaEntity,
)
from quorum.metadata.records import ClientQuotaEntityData

__all__ = [
    "QUOTA_ENTITY_TYPES",
    "QuotaTarget",
    "java_double",
    "parse_quota_value",
    "quota_line",
    "run_quota_configs",
]

# --entity-type -> Kafka's ClientQuotaEntity type.
QUOTA_ENTITY_TYPES: Final = {"users": USER, "clients": CLIENT_ID}
_PLURAL: Final = {USER: "users", CLIENT_ID: "clients"}
_SINGULAR: Final = {USER: "user", CLIENT_ID: "client"}
_DESCRIBED: Final = {USER: "user-principal", CLIENT_ID: "client-id"}


@dataclass(frozen=True, slots=True)
class QuotaTarget:
    """The entity type (``user``, ``client-id``), its name (None: ``--entity-default``), or,
    to describe, ``every`` entity of the type."""

    entity_type: str
    name: str | None
    every: bool = False


def parse_quota_value(text: str) -> float:
    """A quota's value as ``--add-config`` gives it; raises ``ValueError``."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(text)
    return value


def java_double(value: float) -> str:
    """Java's ``Double.toString``: ``1024.0``, ``12.5``, ``1.0E7`` (what Kafka's tools print)."""
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        text = repr(float(value))
        return text if "e" not in text else f"{value:.1f}"
    mantissa, exponent = f"{value:.16e}".split("e")
    digits = repr(float(mantissa))
    return f"{digits}E{int(exponent)}"


def quota_line(entity: ClientQuotaEntity, values: dict[str, float]) -> str:
    """Kafka's ConfigCommand line for one entity."""
    names = dict(entity)
    parts = [
        f"{_DESCRIBED[kind]} '{'<default>' if names[kind] is None else names[kind]}'"
        for kind in (USER, CLIENT_ID)
        if kind in names
    ]
    quotas = ", ".join(f"{key}={java_double(values[key])}" for key in sorted(values))
    return f"Quota configs for {', '.join(parts)} are {quotas}\n"


def _describe(target: QuotaTarget, admin: Any, out: IO[str]) -> None:
    component: tuple[str, int, str | None]
    if target.every:
        component = (target.entity_type, MATCH_TYPE_SPECIFIED, None)
    elif target.name is None:
        component = (target.entity_type, MATCH_TYPE_DEFAULT, None)
    else:
        component = (target.entity_type, MATCH_TYPE_EXACT, target.name)
    for entity, values in admin.describe_client_quotas([component], strict=True):
        out.write(quota_line(entity, values))


def run_quota_configs(
    target: QuotaTarget,
    changes: Sequence[AlterConfigOp],
    admin: Any,
    out: IO[str],
    err: IO[str],
) -> int:
    """Run through ``admin`` (an ``AdminClient``); exit 0, or 1 with Kafka's error line."""
    try:
        if not changes:
            _describe(target, admin, out)
            return 0
        ops = tuple(
            (c.name, None if c.value is None else parse_quota_value(c.value)) for c in changes
        )
        entity = (ClientQuotaEntityData(target.entity_type, target.name),)
        (result,), _ = admin.alter_client_quotas([AlterClientQuotasEntry(entity, ops)])
        if result.error_code != ErrorCode.NONE:
            raise error_for(result.error_code, result.error_message or "")
    except AdminError as exc:
        err.write(f"Error while executing config command: {exc}\n")
        return 1
    if target.name is None:
        out.write(
            f"Completed updating default config for {_PLURAL[target.entity_type]} in the cluster.\n"
        )
    else:
        out.write(f"Completed updating config for {_SINGULAR[target.entity_type]} {target.name}.\n")
    return 0
