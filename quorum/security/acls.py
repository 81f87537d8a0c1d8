"""Kafka's ACL model and its authorizer, pure (docs/authorization.md).

An ACL binding is (resource pattern, access control entry): a resource type and name with a
pattern type (LITERAL, PREFIXED; ``*`` as a LITERAL name matches every resource of the type),
and a principal, a host, an operation and ALLOW or DENY. The numeric codes are Kafka's, so
records and RPCs carry the same numbers Kafka's do.

``Authorizer.authorize`` is Kafka's ``StandardAuthorizer`` decision: super users are allowed
everything; otherwise a matching DENY wins over any ALLOW; an ALLOW of the operation (or of an
operation that implies it) allows; with no ACL at all on the resource,
``allow.everyone.if.no.acl.found`` decides; else denied. A node of this cluster (its
certificate's node URI) acts as its node principal and is allowed CLUSTER_ACTION on the
cluster, and CREATE on ``__consumer_offsets`` (a broker creates it for the group
coordinator). Nothing here does I/O; the image supplies the ACLs.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, TypeVar

from quorum.ids import Uuid
from quorum.metadata.records import AccessControlEntryRecord
from quorum.security.identity import Caller

__all__ = [
    "CLUSTER_RESOURCE_NAME",
    "WILDCARD",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "Authorizer",
    "PatternType",
    "ResourceType",
    "acl_enum",
    "acl_record",
    "binding_from_record",
]

CLUSTER_RESOURCE_NAME: Final = "kafka-cluster"
# The internal topics a broker creates as itself when first needed (Kafka's brokers create
# them with their own principal): a node of the cluster may CREATE these without an ACL.
NODE_CREATED_TOPICS: Final = frozenset({"__consumer_offsets"})
WILDCARD: Final = "*"


class ResourceType(enum.IntEnum):
    """Kafka's ``ResourceType`` codes; this project authorizes TOPIC, GROUP (consumer groups,
    docs/groups.md#authorization) and CLUSTER."""

    ANY = 1  # filters only
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4


class PatternType(enum.IntEnum):
    """Kafka's ``PatternType`` codes."""

    ANY = 1  # filters only: any pattern type
    MATCH = 2  # filters only: the patterns that would match the name
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    """Kafka's ``AclOperation`` codes, those this project uses (and ANY for filters)."""

    ANY = 1  # filters only
    ALL = 2
    READ = 3  # Fetch, ListOffsets' offsets (the Kafka listener's data plane)
    WRITE = 4  # Produce
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10  # DescribeConfigs (on a topic; on the cluster for brokers)
    ALTER_CONFIGS = 11  # IncrementalAlterConfigs, AlterConfigs (on a topic)
    IDEMPOTENT_WRITE = 12  # InitProducerId without a transactional id (on the cluster)


class AclPermissionType(enum.IntEnum):
    ANY = 1  # filters only
    DENY = 2
    ALLOW = 3


# Kafka: an ALLOW of any of these also allows DESCRIBE.
_IMPLIES_DESCRIBE: Final = frozenset(
    {
        AclOperation.DESCRIBE,
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.DELETE,
        AclOperation.ALTER,
        AclOperation.ALL,
    }
)


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: what (resource pattern) and who may or may not do it."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def matches_resource(self, resource_type: ResourceType, name: str) -> bool:
        if self.resource_type is not resource_type:
            return False
        if self.pattern_type is PatternType.LITERAL:
            return self.resource_name in (name, WILDCARD)
        return self.pattern_type is PatternType.PREFIXED and name.startswith(self.resource_name)

    def problem(self) -> str | None:
        """Why this binding cannot be stored (Kafka's rules), or None."""
        if self.resource_type not in (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER):
            return f"resource type {self.resource_type.name}: allowed TOPIC, GROUP or CLUSTER"
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            return f"pattern type {self.pattern_type.name}: allowed LITERAL or PREFIXED"
        if self.operation is AclOperation.ANY:
            return "operation ANY is for filters; allowed: ALL, CREATE, DELETE, ALTER, ..."
        if self.permission_type is AclPermissionType.ANY:
            return "permission type ANY is for filters; allowed: ALLOW or DENY"
        if not self.resource_name:
            return "the resource name is empty"
        if self.resource_type is ResourceType.CLUSTER and (
            self.resource_name != CLUSTER_RESOURCE_NAME
            or self.pattern_type is not PatternType.LITERAL
        ):
            return f"a CLUSTER resource is the LITERAL name {CLUSTER_RESOURCE_NAME!r}"
        if self.pattern_type is PatternType.PREFIXED and self.resource_name == WILDCARD:
            return "a PREFIXED pattern cannot be '*' (use LITERAL '*' for every resource)"
        kind, _, name = self.principal.partition(":")
        if kind != "User" or not name:
            return f"principal {self.principal!r}: allowed 'User:<name>' or 'User:*'"
        if self.host != WILDCARD:
            return f"host {self.host!r}: only '*' is supported"
        return None


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Kafka's ``AclBindingFilter``: None (or ANY) matches anything in that field; pattern
    type MATCH matches the stored patterns that would apply to ``resource_name``."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def matches(self, acl: AclBinding) -> bool:
        if (
            self.resource_type is not ResourceType.ANY
            and acl.resource_type is not self.resource_type
        ):
            return False
        if self.pattern_type is PatternType.MATCH:
            if self.resource_name is not None and not acl.matches_resource(
                acl.resource_type, self.resource_name
            ):
                return False
        else:
            if (
                self.pattern_type is not PatternType.ANY
                and acl.pattern_type is not self.pattern_type
            ):
                return False
            if self.resource_name is not None and acl.resource_name != self.resource_name:
                return False
        if self.principal is not None and acl.principal != self.principal:
            return False
        if self.host is not None and acl.host != self.host:
            return False
        if self.operation is not AclOperation.ANY and acl.operation is not self.operation:
            return False
        return (
            self.permission_type is AclPermissionType.ANY
            or acl.permission_type is self.permission_type
        )


class Authorizer:
    """Kafka's StandardAuthorizer decision over one set of ACLs (an image's)."""

    def __init__(
        self,
        acls: Mapping[Uuid, AclBinding] | Iterable[AclBinding],
        *,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
        cluster_id: str | None = None,
    ) -> None:
        values = acls.values() if isinstance(acls, Mapping) else acls
        self._by_type: dict[ResourceType, list[AclBinding]] = {}
        for acl in values:
            self._by_type.setdefault(acl.resource_type, []).append(acl)
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self.cluster_id = cluster_id

    def authorize(
        self,
        caller: Caller,
        operation: AclOperation,
        resource_type: ResourceType,
        resource_name: str = CLUSTER_RESOURCE_NAME,
    ) -> bool:
        principal = caller.principal
        if principal in self.super_users:
            return True
        own_node = (
            caller.node_id is not None
            and caller.cluster_id is not None
            and caller.cluster_id == self.cluster_id
        )
        if own_node and (
            (operation is AclOperation.CLUSTER_ACTION and resource_type is ResourceType.CLUSTER)
            or (
                operation is AclOperation.CREATE
                and resource_type is ResourceType.TOPIC
                and resource_name in NODE_CREATED_TOPICS
            )
        ):
            return True
        matching = [
            acl
            for acl in self._by_type.get(resource_type, ())
            if acl.matches_resource(resource_type, resource_name)
        ]
        if not matching:
            return self.allow_everyone_if_no_acl_found
        applies = [acl for acl in matching if acl.principal in (principal, "User:*")]
        for acl in applies:
            if acl.permission_type is AclPermissionType.DENY and acl.operation in (
                operation,
                AclOperation.ALL,
            ):
                return False
        for acl in applies:
            if acl.permission_type is not AclPermissionType.ALLOW:
                continue
            if acl.operation in (operation, AclOperation.ALL):
                return True
            if operation is AclOperation.DESCRIBE and acl.operation in _IMPLIES_DESCRIBE:
                return True
            # Kafka: an ALLOW of ALTER_CONFIGS also allows DESCRIBE_CONFIGS.
            if (
                operation is AclOperation.DESCRIBE_CONFIGS
                and acl.operation is AclOperation.ALTER_CONFIGS
            ):
                return True
        return False

    def authorize_any(
        self, caller: Caller, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Kafka's ``authorizeByResourceType``: whether ``caller`` may ``operation`` at least
        one resource of ``resource_type`` (InitProducerId's "WRITE on any topic"). An ALLOW
        counts unless a DENY of the caller covers its pattern (the same literal name, a prefix
        of it, or every resource); with no ACL of the type at all,
        ``allow.everyone.if.no.acl.found`` decides."""
        if caller.principal in self.super_users:
            return True
        every = self._by_type.get(resource_type, ())
        if not every:
            return self.allow_everyone_if_no_acl_found
        applies = [
            acl
            for acl in every
            if acl.principal in (caller.principal, "User:*")
            and acl.operation in (operation, AclOperation.ALL)
        ]
        denies = [acl for acl in applies if acl.permission_type is AclPermissionType.DENY]
        for allow in applies:
            if allow.permission_type is not AclPermissionType.ALLOW:
                continue
            if not any(_covers(deny, allow) for deny in denies):
                return True
        return False


def _covers(deny: AclBinding, allow: AclBinding) -> bool:
    """Whether ``deny`` denies every resource ``allow``'s pattern allows."""
    if deny.pattern_type is PatternType.LITERAL and deny.resource_name == WILDCARD:
        return True
    if deny.pattern_type is PatternType.PREFIXED:
        return allow.resource_name != WILDCARD and allow.resource_name.startswith(
            deny.resource_name
        )
    return allow.pattern_type is PatternType.LITERAL and allow.resource_name == deny.resource_name


E = TypeVar("E", bound=enum.IntEnum)


def acl_enum(kind: type[E], field: str, value: int) -> E:
    """``kind(value)``, or ``ValueError`` naming ``field`` and the allowed codes."""
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(f"{m.value} ({m.name})" for m in kind)
        raise ValueError(f"{field} {value} is not one of {allowed}") from None


def binding_from_record(record: AccessControlEntryRecord) -> AclBinding:
    """The binding a record stores; ``ValueError`` naming the field for a code Kafka's model
    does not have here, or a binding that cannot be stored (``AclBinding.problem``)."""
    binding = AclBinding(
        resource_type=acl_enum(ResourceType, "resource_type", record.resource_type),
        resource_name=record.resource_name,
        pattern_type=acl_enum(PatternType, "pattern_type", record.pattern_type),
        principal=record.principal,
        host=record.host,
        operation=acl_enum(AclOperation, "operation", record.operation),
        permission_type=acl_enum(AclPermissionType, "permission_type", record.permission_type),
    )
    problem = binding.problem()
    if problem is not None:
        raise ValueError(problem)
    return binding


def acl_record(acl_id: Uuid, binding: AclBinding) -> AccessControlEntryRecord:
    return AccessControlEntryRecord(
        id=acl_id,
        resource_type=int(binding.resource_type),
        resource_name=binding.resource_name,
        pattern_type=int(binding.pattern_type),
        principal=binding.principal,
        host=binding.host,
        operation=int(binding.operation),
        permission_type=int(binding.permission_type),
    )
