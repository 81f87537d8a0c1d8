"""The Spark jobs name every ACL code a stored ACL can carry as quorum.security.acls names it
(GROUP and READ came with consumer groups, docs/groups.md)."""

from __future__ import annotations

import pytest

from quorum.security.acls import AclOperation, AclPermissionType, PatternType, ResourceType

jobs = pytest.importorskip("quorum.analytics.jobs")


@pytest.mark.parametrize(
    ("column", "enum", "filters_only"),
    [
        ("resource_type", ResourceType, {ResourceType.ANY}),
        ("pattern_type", PatternType, {PatternType.ANY, PatternType.MATCH}),
        ("operation", AclOperation, {AclOperation.ANY}),
        ("permission_type", AclPermissionType, {AclPermissionType.ANY}),
    ],
)
def test_every_storable_code_has_its_name(column: str, enum: type, filters_only: set) -> None:
    expected = {m.value: m.name for m in enum if m not in filters_only}  # type: ignore[attr-defined]
    assert jobs._ACL_NAMES[column] == expected
