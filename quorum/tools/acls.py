"""``metaquorum acls``: add, remove and list ACLs, like kafka-acls.sh (docs/authorization.md).

    metaquorum acls --bootstrap-server H:P --command-config admin.properties \\
        --add --allow-principal User:CN=alice --operation Describe --topic orders
    metaquorum acls ... --list [--topic orders] [--resource-pattern-type match]
    metaquorum acls ... --remove --allow-principal User:CN=alice --topic orders --force

Listing prints kafka-acls' shape: per resource pattern, "Current ACLs for resource
`ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`:" and one line per
entry "(principal=User:CN=alice, host=*, operation=DESCRIBE, permissionType=ALLOW)".
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TextIO

from quorum.security.acls import (
    CLUSTER_RESOURCE_NAME,
    WILDCARD,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

__all__ = ["AclCommandError", "add_acl_arguments", "run_acl_command"]


class AclCommandError(ValueError):
    """The arguments do not make an ACL command; the message says what to give."""


def add_acl_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_mutually_exclusive_group(required=True)
    actions.add_argument("--add", action="store_true", help="add the ACLs described")
    actions.add_argument("--remove", action="store_true", help="remove the ACLs matched")
    actions.add_argument("--list", action="store_true", help="list ACLs (all, or those matched)")
    parser.add_argument(
        "--bootstrap-server",
        "--bootstrap-controller",
        dest="bootstrap",
        required=True,
        metavar="HOST:PORT[,HOST:PORT...]",
        help="the controllers' listeners, tried in turn",
    )
    parser.add_argument("--allow-principal", action="append", default=[], metavar="PRINCIPAL")
    parser.add_argument("--deny-principal", action="append", default=[], metavar="PRINCIPAL")
    parser.add_argument("--principal", help="with --list / --remove: only this principal's ACLs")
    parser.add_argument(
        "--operation",
        action="append",
        default=[],
        metavar="OP",
        help="All, Create, Delete, Alter, Describe or ClusterAction (repeatable; --add "
        "defaults to All)",
    )
    parser.add_argument("--topic", action="append", default=[], metavar="NAME")
    parser.add_argument(
        "--group", action="append", default=[], metavar="NAME", help="a consumer group"
    )
    parser.add_argument("--cluster", action="store_true", help="the cluster resource")
    parser.add_argument(
        "--resource-pattern-type",
        default=None,
        choices=["literal", "prefixed", "match", "any"],
        help="--add: literal (default) or prefixed; --list/--remove: also match (the ACLs "
        "that apply to the name) or any (default for --list)",
    )
    parser.add_argument(
        "--force", action="store_true", help="--remove without confirming (kept for kafka-acls)"
    )


def _operation(text: str) -> AclOperation:
    key = text.replace("-", "_").upper()
    key = {
        "CLUSTERACTION": "CLUSTER_ACTION",
        "IDEMPOTENTWRITE": "IDEMPOTENT_WRITE",
        "ALTERCONFIGS": "ALTER_CONFIGS",
        "DESCRIBECONFIGS": "DESCRIBE_CONFIGS",
    }.get(key, key)
    try:
        operation = AclOperation[key]
    except KeyError:
        operation = AclOperation.ANY
    if operation is AclOperation.ANY:
        allowed = ", ".join(op.name.title().replace("_", "") for op in AclOperation if op.value > 1)
        raise AclCommandError(f"--operation {text!r} is not an operation; allowed: {allowed}")
    return operation


def _resources(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    resources = [(ResourceType.TOPIC, name) for name in args.topic]
    resources += [(ResourceType.GROUP, name) for name in args.group]
    if args.cluster:
        resources.append((ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME))
    return resources


@dataclass(frozen=True)
class AclCommand:
    action: str
    bindings: tuple[AclBinding, ...] = ()
    filters: tuple[AclBindingFilter, ...] = ()


def command_from_args(args: argparse.Namespace) -> AclCommand:
    resources = _resources(args)
    pattern_text = args.resource_pattern_type
    if args.add:
        if not resources:
            raise AclCommandError("--add needs a resource: --topic NAME, --group NAME or --cluster")
        principals = [(p, AclPermissionType.ALLOW) for p in args.allow_principal]
        principals += [(p, AclPermissionType.DENY) for p in args.deny_principal]
        if not principals:
            raise AclCommandError("--add needs --allow-principal or --deny-principal")
        if pattern_text not in (None, "literal", "prefixed"):
            raise AclCommandError("--add takes --resource-pattern-type literal or prefixed")
        pattern = PatternType.PREFIXED if pattern_text == "prefixed" else PatternType.LITERAL
        operations = [_operation(o) for o in args.operation] or [AclOperation.ALL]
        bindings = tuple(
            AclBinding(rtype, name, pattern, principal, WILDCARD, operation, permission)
            for (rtype, name), (principal, permission), operation in itertools.product(
                resources, principals, operations
            )
        )
        return AclCommand("add", bindings=bindings)
    pattern = PatternType[(pattern_text or ("any" if args.list else "literal")).upper()]
    who: list[str | None] = [*args.allow_principal, *args.deny_principal]
    if args.principal:
        who.append(args.principal)
    operations = [_operation(o) for o in args.operation] or [AclOperation.ANY]
    permission_of = dict.fromkeys(args.allow_principal, AclPermissionType.ALLOW)
    permission_of.update(dict.fromkeys(args.deny_principal, AclPermissionType.DENY))
    targets: list[tuple[ResourceType, str | None]] = list(resources) or [(ResourceType.ANY, None)]
    if args.remove and targets == [(ResourceType.ANY, None)]:
        raise AclCommandError("--remove needs a resource: --topic NAME, --group NAME or --cluster")
    filters = tuple(
        AclBindingFilter(
            resource_type=rtype,
            resource_name=name,
            pattern_type=pattern,
            principal=principal,
            operation=operation,
            permission_type=permission_of.get(principal or "", AclPermissionType.ANY),
        )
        for (rtype, name), principal, operation in itertools.product(
            targets, who or [None], operations
        )
    )
    return AclCommand("remove" if args.remove else "list", filters=filters)


def _pattern_text(binding: AclBinding) -> str:
    return (
        f"ResourcePattern(resourceType={binding.resource_type.name}, "
        f"name={binding.resource_name}, patternType={binding.pattern_type.name})"
    )


def _entry_text(binding: AclBinding) -> str:
    return (
        f"\t(principal={binding.principal}, host={binding.host}, "
        f"operation={binding.operation.name}, permissionType={binding.permission_type.name})"
    )


def print_acls(bindings: Iterable[AclBinding], out: TextIO, *, heading: str) -> None:
    by_pattern: dict[tuple[ResourceType, str, PatternType], list[AclBinding]] = {}
    for binding in bindings:
        key = (binding.resource_type, binding.resource_name, binding.pattern_type)
        by_pattern.setdefault(key, []).append(binding)
    for group in by_pattern.values():
        out.write(f"{heading} `{_pattern_text(group[0])}`: \n")
        for binding in group:
            out.write(_entry_text(binding) + "\n")
        out.write("\n")


def run_acl_command(command: AclCommand, admin: object, out: TextIO) -> int:
    """Run ``command`` with ``admin`` (an ``AdminClient``); raises its errors."""
    from quorum.admin import AdminClient  # noqa: PLC0415 - loads gRPC

    assert isinstance(admin, AdminClient)
    if command.action == "add":
        admin.create_acls(command.bindings).all()
        print_acls(command.bindings, out, heading="Adding ACLs for resource")
        return 0
    if command.action == "remove":
        removed = admin.delete_acls(command.filters).all()
        print_acls(removed, out, heading="Removed ACLs for resource")
        if not removed:
            out.write("No ACLs matched.\n")
        return 0
    seen: dict[AclBinding, None] = {}
    for acl_filter in command.filters:
        for binding in admin.describe_acls(acl_filter):
            seen.setdefault(binding)
    print_acls(seen, out, heading="Current ACLs for resource")
    return 0
