"""Config and ACL records: a topic's, broker's or cluster's config entry (KIP-631 type 4) and
the ACLs KRaft stores (types 6 and 16), each with its wire form.

``quorum.metadata.records`` documents the wire form and gathers these with the other families;
``record_codec`` dispatches to the ``*_to_wire`` / ``*_from_wire`` functions here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from quorum.ids import Uuid
from quorum.metadata.record_fields import (
    INT8_MAX,
    check_int,
    check_optional_str,
    check_str,
    check_uuid,
    uuid_from_wire,
)

__all__ = [
    "AccessControlEntryRecord",
    "ConfigRecord",
    "ConfigResourceType",
    "RemoveAccessControlEntryRecord",
    "acl_from_wire",
    "acl_to_wire",
    "config_from_wire",
    "config_to_wire",
    "remove_acl_from_wire",
    "remove_acl_to_wire",
]


class ConfigResourceType:
    """``ConfigRecord.resource_type`` values, numbered as Kafka's ``ConfigResource.Type``."""

    TOPIC: Final = 2
    BROKER: Final = 4


@dataclass(frozen=True, slots=True)
class ConfigRecord:
    resource_type: int
    resource_name: str
    name: str
    value: str | None

    TYPE: ClassVar[int] = 4
    VERSION: ClassVar[int] = 0

    def __post_init__(self) -> None:
        check_int(self, "resource_type", self.resource_type, 0, INT8_MAX)
        check_str(self, "resource_name", self.resource_name)
        check_str(self, "name", self.name)
        check_optional_str(self, "value", self.value)


@dataclass(frozen=True, slots=True)
class AccessControlEntryRecord:
    """An ACL (docs/authorization.md), as KRaft stores it: a resource pattern and an access
    control entry under an id. The enum fields hold Kafka's codes (``quorum.security.acls``)."""

    id: Uuid
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int

    TYPE: ClassVar[int] = 6
    VERSION: ClassVar[int] = 0

    def __post_init__(self) -> None:
        check_uuid(self, "id", self.id)
        for name in ("resource_type", "pattern_type", "operation", "permission_type"):
            check_int(self, name, getattr(self, name), 0, INT8_MAX)
        for name in ("resource_name", "principal", "host"):
            check_str(self, name, getattr(self, name))


@dataclass(frozen=True, slots=True)
class RemoveAccessControlEntryRecord:
    """Removes the ACL with this id."""

    id: Uuid

    TYPE: ClassVar[int] = 16
    VERSION: ClassVar[int] = 0

    def __post_init__(self) -> None:
        check_uuid(self, "id", self.id)


# ----- wire form --------------------------------------------------------------------------


def config_to_wire(r: ConfigRecord) -> list[object]:
    return [r.resource_type, r.resource_name, r.name, r.value]


def acl_to_wire(r: AccessControlEntryRecord) -> list[object]:
    return [
        r.id.bytes,
        r.resource_type,
        r.resource_name,
        r.pattern_type,
        r.principal,
        r.host,
        r.operation,
        r.permission_type,
    ]


def remove_acl_to_wire(r: RemoveAccessControlEntryRecord) -> list[object]:
    return [r.id.bytes]


def config_from_wire(f: Sequence[Any]) -> ConfigRecord:
    return ConfigRecord(f[0], f[1], f[2], f[3])


def acl_from_wire(f: Sequence[Any]) -> AccessControlEntryRecord:
    return AccessControlEntryRecord(uuid_from_wire(f[0]), f[1], f[2], f[3], f[4], f[5], f[6], f[7])


def remove_acl_from_wire(f: Sequence[Any]) -> RemoveAccessControlEntryRecord:
    return RemoveAccessControlEntryRecord(uuid_from_wire(f[0]))
