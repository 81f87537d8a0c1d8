"""``metaquorum acls`` with consumer groups (docs/groups.md#authorization): ``--group`` names
a GROUP resource (Kafka's code 3), as kafka-acls' ``--group`` does."""

from __future__ import annotations

import io

from quorum.cli import build_parser
from quorum.security.acls import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from quorum.tools.acls import command_from_args, print_acls


def command(*argv: str) -> object:
    return command_from_args(
        build_parser().parse_args(["acls", "--bootstrap-server", "h:1", *argv])
    )


def test_add_read_on_a_group_and_a_topic() -> None:
    added = command(
        "--add", "--allow-principal", "User:CN=app", "--operation", "Read",
        "--group", "app-group", "--topic", "orders",
    )  # fmt: skip
    bindings = added.bindings  # type: ignore[attr-defined]
    assert {(b.resource_type, b.resource_name, b.operation) for b in bindings} == {
        (ResourceType.GROUP, "app-group", AclOperation.READ),
        (ResourceType.TOPIC, "orders", AclOperation.READ),
    }
    assert all(b.problem() is None for b in bindings)


def test_list_and_remove_by_group() -> None:
    listed = command("--list", "--group", "app-group")
    (only,) = listed.filters  # type: ignore[attr-defined]
    assert (only.resource_type, only.resource_name) == (ResourceType.GROUP, "app-group")
    out = io.StringIO()
    print_acls(
        [
            AclBinding(
                ResourceType.GROUP,
                "app-group",
                PatternType.LITERAL,
                "User:CN=app",
                "*",
                AclOperation.READ,
                AclPermissionType.ALLOW,
            )
        ],
        out,
        heading="Current ACLs for resource",
    )
    assert "ResourcePattern(resourceType=GROUP, name=app-group, patternType=LITERAL)" in (
        out.getvalue()
    )
