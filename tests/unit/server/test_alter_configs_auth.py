"""Who may alter configs (quorum/server/alter_configs_auth.py): ALTER_CONFIGS on each topic,
on the cluster for a BROKER resource; a resource named twice is left to the controller."""

from __future__ import annotations

from quorum.controller.alter_configs import AlterConfigsRequest, AlterConfigsResource
from quorum.errors import ErrorCode
from quorum.ids import Uuid
from quorum.metadata.delta import replay_records
from quorum.metadata.image import MetadataImage
from quorum.metadata.records import AccessControlEntryRecord, MetadataRecord
from quorum.security.acls import AclOperation, AclPermissionType, PatternType, ResourceType
from quorum.security.authorization import RequestAuthorization
from quorum.security.identity import Caller
from quorum.server.alter_configs_auth import alter_configs_refusals

ENABLED = RequestAuthorization(enabled=True, cluster_id="c")
ALICE = Caller("User:alice", None, None, True, "127.0.0.1:1")


def grant(resource_type: ResourceType, name: str, operation: AclOperation) -> MetadataRecord:
    return AccessControlEntryRecord(
        Uuid.random(),
        int(resource_type),
        name,
        int(PatternType.LITERAL),
        ALICE.principal,
        "*",
        int(operation),
        int(AclPermissionType.ALLOW),
    )


def image(*records: MetadataRecord) -> MetadataImage:
    return replay_records(MetadataImage.EMPTY, enumerate(records))


def request(*resources: tuple[int, str]) -> AlterConfigsRequest:
    return AlterConfigsRequest(tuple(AlterConfigsResource(t, n, ()) for t, n in resources))


def test_topics_need_alter_configs_on_the_topic_and_brokers_on_the_cluster() -> None:
    acls = image(grant(ResourceType.TOPIC, "orders", AclOperation.ALTER_CONFIGS))
    refused = alter_configs_refusals(
        ENABLED, ALICE, acls, request((2, "orders"), (2, "payments"), (4, ""))
    )
    assert sorted(refused) == [1, 2]
    assert refused[1][0] == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert "may not ALTER_CONFIGS topic 'payments'" in refused[1][1]
    assert refused[2][0] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert "--operation AlterConfigs --cluster" in refused[2][1]
    granted = image(grant(ResourceType.CLUSTER, "kafka-cluster", AclOperation.ALTER_CONFIGS))
    assert alter_configs_refusals(ENABLED, ALICE, granted, request((4, ""))) == {}


def test_alter_is_not_alter_configs() -> None:
    acls = image(grant(ResourceType.TOPIC, "orders", AclOperation.ALTER))
    assert list(alter_configs_refusals(ENABLED, ALICE, acls, request((2, "orders")))) == [0]


def test_a_resource_named_twice_is_left_to_the_controller() -> None:
    refused = alter_configs_refusals(
        ENABLED, ALICE, image(), request((2, "orders"), (2, "orders"), (2, "other"))
    )
    assert list(refused) == [2]


def test_without_an_authorizer_everything_is_allowed() -> None:
    disabled = RequestAuthorization.disabled("c")
    assert alter_configs_refusals(disabled, ALICE, image(), request((2, "t"), (4, ""))) == {}
