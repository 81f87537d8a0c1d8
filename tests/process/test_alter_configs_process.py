"""IncrementalAlterConfigs end to end (quorum/controller/alter_configs.py): confluent-kafka's
``AdminClient.incremental_alter_configs`` against a real cluster's Kafka listener (forwarded to
the active controller), and this project's ``AdminClient.incremental_alter_configs`` against
the controllers; the changes read back with DescribeConfigs and from the controllers' image.
The cluster is the data-plane tests' (tests/process/test_kafka_data_process.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from quorum.admin import AlterConfigOp
from quorum.admin import AlterConfigOpType as OpType
from quorum.errors import InvalidConfigError, InvalidRequestError
from quorum.harness import ProcessCluster, wait_until
from tests.process.test_kafka_data_process import create_topic, raw, serving_cluster, ssl_config


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    with serving_cluster(tmp_path_factory.mktemp("alter-configs")) as cluster:
        yield cluster


def described(admin: AdminClient, topic: str) -> dict[str, str]:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    (future,) = admin.describe_configs([resource]).values()
    entries = future.result(timeout=30)
    return {name: entry.value for name, entry in entries.items() if not entry.is_default}


def test_confluent_kafka_sets_appends_and_deletes_topic_configs(cluster: ProcessCluster) -> None:
    create_topic(cluster, "altered", configs={"segment.ms": "60000"})
    admin = AdminClient(ssl_config(cluster))
    resource = ConfigResource(
        ResourceType.TOPIC,
        "altered",
        incremental_configs=[
            ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry(
                "cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND
            ),
            ConfigEntry("segment.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)
    assert described(admin, "altered") == {
        "retention.ms": "3600000",
        "cleanup.policy": "delete,compact",
    }


def test_confluent_kafka_hears_invalid_config_with_the_key(cluster: ProcessCluster) -> None:
    create_topic(cluster, "refused-config")
    admin = AdminClient(ssl_config(cluster))
    resource = ConfigResource(
        ResourceType.TOPIC,
        "refused-config",
        incremental_configs=[
            ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    (future,) = admin.incremental_alter_configs([resource]).values()
    with pytest.raises(KafkaException) as raised:
        future.result(timeout=30)
    error = raised.value.args[0]
    assert error.code() == KafkaError.INVALID_CONFIG
    assert "retention.ms" in error.str()


def test_admin_client_alters_through_the_controllers(cluster: ProcessCluster) -> None:
    create_topic(cluster, "altered-by-grpc")
    with cluster.admin() as admin:
        result = admin.incremental_alter_configs(
            {"altered-by-grpc": [AlterConfigOp("max.message.bytes", "2048")]}
        )
        result.all()
        refused = admin.incremental_alter_configs(
            {"altered-by-grpc": [AlterConfigOp("retention.ms", "1", OpType.APPEND)]}
        )
        with pytest.raises(InvalidRequestError, match="list-typed"):
            refused.all()
        bad = admin.incremental_alter_configs(
            {"altered-by-grpc": [AlterConfigOp("max.message.bytes", "-1")]}
        )
        with pytest.raises(InvalidConfigError, match=r"max\.message\.bytes"):
            bad.all()
    kafka_admin = AdminClient(ssl_config(cluster))
    wait_until(
        lambda: described(kafka_admin, "altered-by-grpc") == {"max.message.bytes": "2048"},
        timeout_s=30,
        what="the broker serves the altered config",
    )


def test_without_alter_configs_on_the_topic_it_is_refused_until_granted(
    cluster: ProcessCluster,
) -> None:
    create_topic(cluster, "guarded-configs")
    mallory = AdminClient(ssl_config(cluster, name="mallory"))
    resource = ConfigResource(
        ResourceType.TOPIC,
        "guarded-configs",
        incremental_configs=[
            ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    (future,) = mallory.incremental_alter_configs([resource]).values()
    with pytest.raises(KafkaException) as raised:
        future.result(timeout=30)
    error = raised.value.args[0]
    assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert "ALTER_CONFIGS" in error.str()
    assert described(AdminClient(ssl_config(cluster)), "guarded-configs") == {}


def test_metaquorum_configs_alters_and_describes_with_kafkas_lines(
    cluster: ProcessCluster,
) -> None:
    create_topic(cluster, "cli-configs")
    base = ("--bootstrap-server", cluster.bootstrap, "--entity-type", "topics")
    base += ("--entity-name", "cli-configs")
    out = cluster.run_cli(
        "configs",
        *base,
        "--alter",
        "--add-config",
        "retention.ms=1000,cleanup.policy=[compact,delete]",
    ).stdout
    assert out == "Completed updating config for topic cli-configs.\n"
    cluster.run_cli("configs", *base, "--alter", "--delete-config", "retention.ms")
    out = cluster.run_cli("configs", *base, "--describe").stdout
    assert out.splitlines() == [
        "Dynamic configs for topic cli-configs are:",
        "  cleanup.policy=compact,delete sensitive=false "
        "synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,delete}",
    ]
    refused = cluster.run_cli(
        "configs", *base, "--alter", "--add-config", "retention.ms=soon", check=False
    )
    assert refused.returncode == 1
    assert "Error while executing config command" in refused.stderr
    assert "retention.ms" in refused.stderr


def test_the_cluster_wide_default_needs_alter_configs_on_the_cluster(
    cluster: ProcessCluster,
) -> None:
    # confluent-kafka refuses an empty broker name locally, so over the raw wire (API key 44).
    def set_default(name: str, value: str) -> tuple[int, str]:
        values = {
            "resources": [
                {
                    "resource_type": 4,
                    "resource_name": "",
                    "configs": [
                        {
                            "name": "unclean.leader.election.enable",
                            "config_operation": 0,
                            "value": value,
                        }
                    ],
                }
            ],
            "validate_only": False,
        }
        connection = raw(cluster, name=name)
        try:
            (answer,) = connection.ask(44, 1, values).responses
        finally:
            connection.close()
        return int(answer.error_code), answer.error_message or ""

    code, message = set_default("mallory", "true")
    assert code == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert "ALTER_CONFIGS on the cluster" in message
    assert set_default("admin", "false") == (0, "")
    code, message = set_default("admin", "maybe")
    assert code == KafkaError.INVALID_CONFIG
    assert "unclean.leader.election.enable: must be true or false" in message


def test_metaquorum_configs_sets_the_cluster_wide_default(cluster: ProcessCluster) -> None:
    base = ("--bootstrap-server", cluster.bootstrap, "--entity-type", "brokers")
    out = cluster.run_cli(
        "configs", *base, "--entity-default", "--alter",
        "--add-config", "unclean.leader.election.enable=true",
    ).stdout  # fmt: skip
    assert out == "Completed updating default config for brokers in the cluster.\n"
    with cluster.admin() as admin:
        with pytest.raises(InvalidConfigError, match="Unknown cluster config name"):
            admin.alter_cluster_configs([AlterConfigOp("retention.ms", "1")])
        admin.alter_cluster_configs(
            [AlterConfigOp("unclean.leader.election.enable", None, OpType.DELETE)]
        )
