"""Who may alter configs (quorum/server/alter_configs_auth.py): ALTER_CONFIGS on each topic,
on the cluster for a BROKER resource; a resource named twice is left to the controller. And
AdminService/DescribeConfigs on a controller: DESCRIBE_CONFIGS, any broker from the image."""

from __future__ import annotations

from quorum.controller.alter_configs import AlterConfigsRequest, AlterConfigsResource
from quorum.controller.broker_configs import DYNAMIC_BROKER_CONFIGS
from quorum.controller.describe_configs import DescribeConfigsOutcome, Describer
from quorum.errors import ErrorCode
from quorum.ids import Uuid
from quorum.metadata.delta import replay_records
from quorum.metadata.image import MetadataImage
from quorum.metadata.records import AccessControlEntryRecord, ConfigRecord, MetadataRecord
from quorum.rpc.v1 import admin_pb2
from quorum.security.acls import AclOperation, AclPermissionType, PatternType, ResourceType
from quorum.security.authorization import RequestAuthorization
from quorum.security.identity import Caller
from quorum.server.alter_configs_auth import alter_configs_refusals, describe_configs_answer

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


# ----- AdminService/DescribeConfigs (describe_configs_answer) ------------------------------------


def describe(
    acls: MetadataImage, *resources: tuple[int, str], synonyms: bool = True
) -> list[DescribeConfigsOutcome]:
    pb = admin_pb2.DescribeConfigsRequest(
        resources=[
            admin_pb2.DescribeConfigsResource(resource_type=t, resource_name=n)
            for t, n in resources
        ],
        include_synonyms=synonyms,
    )
    return describe_configs_answer(Describer(None, ()), ENABLED, ALICE, acls, pb)


def test_a_controller_describes_any_broker_s_dynamic_configs_from_its_image() -> None:
    acls = image(
        grant(ResourceType.CLUSTER, "kafka-cluster", AclOperation.DESCRIBE_CONFIGS),
        ConfigRecord(4, "102", "log.retention.ms", "1000"),
        ConfigRecord(4, "", "log.retention.ms", "2000"),
    )
    (broker, default) = describe(acls, (4, "102"), (4, ""))
    configs = {c.name: c for c in broker.configs}
    assert set(configs) == set(DYNAMIC_BROKER_CONFIGS)  # no broker's file here
    retention = configs["log.retention.ms"]
    assert (retention.value, retention.source, retention.read_only) == ("1000", 2, False)
    assert [(s.source, s.name, s.value) for s in retention.synonyms] == [
        (2, "log.retention.ms", "1000"),
        (3, "log.retention.ms", "2000"),
        (5, "log.retention.hours", "168"),
    ]
    assert [(c.name, c.value, c.source) for c in default.configs] == [
        ("log.retention.ms", "2000", 3)
    ]
    (plain,) = describe(acls, (4, "102"), synonyms=False)
    assert all(c.synonyms == () for c in plain.configs)


def test_describe_configs_needs_describe_configs_on_the_topic_and_the_cluster() -> None:
    acls = image(grant(ResourceType.TOPIC, "orders", AclOperation.DESCRIBE))
    topic, broker = describe(acls, (2, "orders"), (4, "1"))
    assert topic.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert "--operation DescribeConfigs" in (topic.error_message or "")
    assert broker.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    (unknown,) = describe(
        image(grant(ResourceType.TOPIC, "*", AclOperation.ALTER_CONFIGS)), (2, "t")
    )
    assert unknown.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
