"""Spark's replay shows the ACLs (docs/authorization.md#acls-in-the-metadata-log): ``acls_as_of``
on a real log equals the image a plain replay builds, at every offset asked."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from quorum.analytics import jobs, source
from quorum.ids import Uuid
from quorum.metadata.delta import replay_records
from quorum.metadata.image import MetadataImage
from quorum.metadata.records import Record, RemoveAccessControlEntryRecord, TopicRecord
from quorum.security.acls import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    acl_record,
)
from tests.spark.test_analytics_source import METADATA_DIR, write_log

IDS = [Uuid.random(random.Random(500 + n)) for n in range(4)]
BINDINGS = [
    AclBinding(
        ResourceType.TOPIC, "orders", PatternType.LITERAL, "User:CN=alice", "*",
        AclOperation.DESCRIBE, AclPermissionType.ALLOW,
    ),
    AclBinding(
        ResourceType.TOPIC, "pay.", PatternType.PREFIXED, "User:CN=bob", "*",
        AclOperation.ALL, AclPermissionType.DENY,
    ),
    AclBinding(
        ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, "User:CN=ops", "*",
        AclOperation.ALTER, AclPermissionType.ALLOW,
    ),
]  # fmt: skip
HISTORY: list[tuple[int, list[Record]]] = [
    (1, [TopicRecord("orders", IDS[3])]),  # 0
    (1, [acl_record(IDS[0], BINDINGS[0]), acl_record(IDS[1], BINDINGS[1])]),  # 1, 2
    (1, [acl_record(IDS[2], BINDINGS[2])]),  # 3
    (1, [RemoveAccessControlEntryRecord(IDS[1])]),  # 4
]


def python_acls(as_of: int) -> list[tuple[str, ...]]:
    pairs = [(offset, r) for offset, r in enumerate(r for _, rs in HISTORY for r in rs)]
    image = replay_records(MetadataImage.EMPTY, [p for p in pairs if p[0] <= as_of])
    return sorted(
        (
            str(acl_id),
            b.resource_type.name,
            b.resource_name,
            b.pattern_type.name,
            b.principal,
            b.host,
            b.operation.name,
            b.permission_type.name,
        )
        for acl_id, b in image.acls.items()
    )


def test_acls_as_of_matches_a_plain_replay(spark: Any, tmp_path: Path) -> None:
    write_log(tmp_path / METADATA_DIR, HISTORY)
    df = source.load(spark, tmp_path)
    for offset in (0, 2, 3, 4):
        rows = jobs.acls_as_of(df, offset).collect()
        got = sorted(tuple(row[c] for c in jobs.ACL_COLUMNS) for row in rows)
        assert got == python_acls(offset), offset
    final = {row["principal"]: row for row in jobs.acls_as_of(df, 4).collect()}
    assert set(final) == {"User:CN=alice", "User:CN=ops"}
    assert final["User:CN=ops"]["resource_type"] == "CLUSTER"
