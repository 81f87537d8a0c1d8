"""ACL bindings and filters to and from their protobuf form (admin.proto), shared by the admin
service and the AdminClient. A code outside Kafka's enum is a ``ValueError`` naming the field
and the allowed values (the service answers it INVALID_REQUEST)."""

from __future__ import annotations

from quorum.rpc.v1 import admin_pb2
from quorum.security.acls import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    acl_enum,
)

__all__ = ["binding_from_proto", "binding_to_proto", "filter_from_proto", "filter_to_proto"]


def binding_to_proto(binding: AclBinding) -> admin_pb2.AclBinding:
    return admin_pb2.AclBinding(
        resource_type=int(binding.resource_type),
        resource_name=binding.resource_name,
        pattern_type=int(binding.pattern_type),
        principal=binding.principal,
        host=binding.host,
        operation=int(binding.operation),
        permission_type=int(binding.permission_type),
    )


def binding_from_proto(pb: admin_pb2.AclBinding) -> AclBinding:
    return AclBinding(
        resource_type=acl_enum(ResourceType, "resource_type", pb.resource_type),
        resource_name=pb.resource_name,
        pattern_type=acl_enum(PatternType, "pattern_type", pb.pattern_type),
        principal=pb.principal,
        host=pb.host,
        operation=acl_enum(AclOperation, "operation", pb.operation),
        permission_type=acl_enum(AclPermissionType, "permission_type", pb.permission_type),
    )


def filter_to_proto(acl_filter: AclBindingFilter) -> admin_pb2.AclFilter:
    pb = admin_pb2.AclFilter(
        resource_type=int(acl_filter.resource_type),
        pattern_type=int(acl_filter.pattern_type),
        operation=int(acl_filter.operation),
        permission_type=int(acl_filter.permission_type),
    )
    if acl_filter.resource_name is not None:
        pb.resource_name = acl_filter.resource_name
    if acl_filter.principal is not None:
        pb.principal = acl_filter.principal
    if acl_filter.host is not None:
        pb.host = acl_filter.host
    return pb


def filter_from_proto(pb: admin_pb2.AclFilter) -> AclBindingFilter:
    """A filter; an unset enum (0) means ANY, as an absent string means any value."""
    return AclBindingFilter(
        resource_type=acl_enum(ResourceType, "resource_type", pb.resource_type or 1),
        resource_name=pb.resource_name if pb.HasField("resource_name") else None,
        pattern_type=acl_enum(PatternType, "pattern_type", pb.pattern_type or 1),
        principal=pb.principal if pb.HasField("principal") else None,
        host=pb.host if pb.HasField("host") else None,
        operation=acl_enum(AclOperation, "operation", pb.operation or 1),
        permission_type=acl_enum(AclPermissionType, "permission_type", pb.permission_type or 1),
    )
