"""IncrementalAlterConfigs end to end (quorum/controller/alter_configs.py): confluent-kafka's
``AdminClient.incremental_alter_configs`` against a real cluster's Kafka listener (forwarded to
the active controller), and this project's ``AdminClient.incremental_alter_configs`` against
the controllers; the changes read back with DescribeConfigs and from the controllers' image.
The cluster is the data-plane tests' (tests/process/test_kafka_data_process.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    OffsetSpec,
    ResourceType,
)

from quorum.admin import AlterConfigOp
from quorum.admin import AlterConfigOpType as OpType
from quorum.errors import InvalidConfigError, InvalidRequestError
from quorum.harness import ProcessCluster, wait_until
from tests.process.test_kafka_data_process import create_topic, raw, serving_cluster, ssl_config


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    # Retention checked twice a second, so that a retention change shows within the test.
    with serving_cluster(
        tmp_path_factory.mktemp("alter-configs"),
        broker_settings={"log.retention.check.interval.ms": 500},
    ) as cluster:
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


def test_confluent_kafka_alter_configs_replaces_the_whole_set(cluster: ProcessCluster) -> None:
    """confluent-kafka's deprecated alter_configs is Kafka's AlterConfigs: the configs given
    replace the topic's set, so one set at creation and not given again goes back to its
    default."""
    create_topic(cluster, "replaced", configs={"segment.ms": "60000"})
    admin = AdminClient(ssl_config(cluster))
    wait_until(
        lambda: described(admin, "replaced") == {"segment.ms": "60000"},
        timeout_s=30,
        what="the topic's config served",
    )
    resource = ConfigResource(
        ResourceType.TOPIC, "replaced", set_config={"retention.ms": "7200000"}
    )
    with pytest.warns(DeprecationWarning, match="incremental_alter_configs"):
        futures = admin.alter_configs([resource])
    for future in futures.values():
        future.result(timeout=30)
    # librdkafka may ask the broker that did not forward the write: it applies it shortly.
    wait_until(
        lambda: described(admin, "replaced") == {"retention.ms": "7200000"},
        timeout_s=30,
        what="retention.ms alone, segment.ms back to its default",
    )


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


def test_metaquorum_configs_alters_and_describes_one_broker(cluster: ProcessCluster) -> None:
    base = ("--bootstrap-server", cluster.bootstrap, "--entity-type", "brokers")
    one = (*base, "--entity-name", "101")
    out = cluster.run_cli("configs", *one, "--alter", "--add-config", "log.segment.bytes=8192")
    assert out.stdout == "Completed updating config for broker 101.\n"
    try:
        assert cluster.run_cli("configs", *one, "--describe").stdout.splitlines() == [
            "Dynamic configs for broker 101 are:",
            "  log.segment.bytes=8192 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:"
            "log.segment.bytes=8192, DEFAULT_CONFIG:log.segment.bytes=1073741824}",
        ]
        everything = cluster.run_cli("configs", *one, "--describe", "--all").stdout
        assert everything.splitlines()[0] == "All configs for broker 101 are:"
        assert "  min.insync.replicas=1 sensitive=false synonyms={DEFAULT_CONFIG:" in everything
        # Asked of broker 101 itself: its file's keys too, as kafka-configs shows them.
        assert "  node.id=101 sensitive=false synonyms={STATIC_BROKER_CONFIG:node.id=101}" in (
            everything.splitlines()
        )
        refused = cluster.run_cli(
            "configs", *one, "--alter", "--add-config", "node.id=7", check=False
        )
        assert refused.returncode == 1
        assert "Cannot update these configs dynamically: Set(node.id)" in refused.stderr
        # and the broker applies it: what it describes itself
        wait_until(
            lambda: broker_configs(cluster, 101, "101")["log.segment.bytes"] == ("8192", 2),
            30,
            "broker 101 has its value",
        )
    finally:
        cluster.run_cli("configs", *one, "--alter", "--delete-config", "log.segment.bytes")
    assert cluster.run_cli("configs", *one, "--describe").stdout == (
        "Dynamic configs for broker 101 are:\n"
    )


def test_the_admin_client_reads_its_own_broker_config_writes(cluster: ProcessCluster) -> None:
    """Read-your-writes over gRPC: describe_configs carries the offset of the client's own
    last write (min_metadata_offset), so whichever controller answers has applied it."""
    with cluster.admin() as admin:
        for value in ("1000", "2000", "3000"):
            admin.alter_cluster_configs([AlterConfigOp("log.retention.ms", value)], broker_id=102)
            (outcome,) = admin.describe_configs([(4, "102")])
            configs = {c.name: (c.value, c.source) for c in outcome.configs}
            assert configs["log.retention.ms"] == (value, 2)  # DYNAMIC_BROKER_CONFIG
        admin.alter_cluster_configs(
            [AlterConfigOp("log.retention.ms", None, OpType.DELETE)], broker_id=102
        )
        (outcome,) = admin.describe_configs([(4, "102")])
        assert {c.name: c.value for c in outcome.configs}["log.retention.ms"] is None


def test_metaquorum_configs_sets_the_cluster_wide_default(cluster: ProcessCluster) -> None:
    base = ("--bootstrap-server", cluster.bootstrap, "--entity-type", "brokers")
    out = cluster.run_cli(
        "configs", *base, "--entity-default", "--alter",
        "--add-config", "unclean.leader.election.enable=true",
    ).stdout  # fmt: skip
    assert out == "Completed updating default config for brokers in the cluster.\n"
    with cluster.admin() as admin:
        with pytest.raises(InvalidRequestError, match="Cannot update these configs dynamically"):
            admin.alter_cluster_configs([AlterConfigOp("retention.ms", "1")])
        admin.alter_cluster_configs(
            [AlterConfigOp("unclean.leader.election.enable", None, OpType.DELETE)]
        )


# ----- dynamic broker configs --------------------------------------------------------------------


def ask(cluster: ProcessCluster, broker: int, api_key: int, version: int, values: Any) -> Any:
    """One request over the raw wire to ``broker`` (confluent-kafka refuses an empty broker
    name locally), as the admin."""
    connection = raw(cluster, broker)
    try:
        return connection.ask(api_key, version, values)
    finally:
        connection.close()


def alter_broker(cluster: ProcessCluster, broker: int, name: str, **configs: str | None) -> None:
    """IncrementalAlterConfigs of broker resource ``name`` (an id, or "" for the cluster-wide
    default) sent to ``broker``; keyword names use '_' for '.', None deletes."""
    entries = [
        {
            "name": key.replace("_", "."),
            "config_operation": 1 if value is None else 0,
            "value": value,
        }
        for key, value in configs.items()
    ]
    values = {
        "resources": [{"resource_type": 4, "resource_name": name, "configs": entries}],
        "validate_only": False,
    }
    (answer,) = ask(cluster, broker, 44, 1, values).responses
    assert (int(answer.error_code), answer.error_message) == (0, None)


def broker_configs(cluster: ProcessCluster, broker: int, name: str) -> dict[str, tuple[Any, int]]:
    """DescribeConfigs of broker resource ``name`` at ``broker``: name -> (value, source)."""
    values = {
        "resources": [{"resource_type": 4, "resource_name": name, "configuration_keys": None}],
        "include_synonyms": True,
        "include_documentation": False,
    }
    (result,) = ask(cluster, broker, 32, 4, values).results
    assert int(result.error_code) == 0, result.error_message
    return {c.name: (c.value, c.config_source) for c in result.configs}


def topic_config(admin: AdminClient, topic: str, key: str) -> tuple[str, int]:
    (future,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
    entry = future.result(timeout=30)[key]
    return entry.value, int(entry.source)


def test_a_cluster_wide_retention_is_on_every_broker_and_deletes_old_segments(
    cluster: ProcessCluster,
) -> None:
    """The cluster-wide default log.retention.ms, set through broker 102, is what DescribeConfigs
    answers on both brokers (for the default and for a topic without retention.ms), and broker
    101, the leader, deletes the topic's old segments at its next retention check."""
    create_topic(cluster, "retained", configs={"segment.bytes": "400"})
    producer = Producer(ssl_config(cluster) | {"acks": "all", "linger.ms": 0})
    for index in range(30):
        producer.produce("retained", value=b"v" * 100, key=str(index).encode())
        producer.flush(10)  # one batch per record: several segments of 400 bytes
    directory = cluster.nodes[101].log_dir / "retained-0"
    assert len(list(directory.glob("*.log"))) > 3
    admins = {b: AdminClient(ssl_config(cluster, b)) for b in (101, 102)}
    partition = TopicPartition("retained", 0)

    def earliest() -> int:
        offsets = admins[101].list_offsets({partition: OffsetSpec.earliest()})
        return int(offsets[partition].result(timeout=30).offset)

    assert earliest() == 0
    try:
        alter_broker(cluster, 102, "", log_retention_ms="1")
        for broker in (101, 102):
            wait_until(
                lambda b=broker: (
                    broker_configs(cluster, b, "").get("log.retention.ms") == ("1", 3)
                ),  # DYNAMIC_DEFAULT_BROKER_CONFIG
                30,
                f"broker {broker} describes the new default",
            )
            assert topic_config(admins[broker], "retained", "retention.ms") == ("1", 3)
            assert broker_configs(cluster, broker, str(broker))["log.retention.ms"] == ("1", 3)
        wait_until(lambda: earliest() == 30, 30, "retention moved the log start offset")
        # The old segments are gone: only the active one (rolled, empty) is left.
        assert [p.name for p in directory.glob("*.log")] == [f"{30:020d}.log"]
    finally:
        alter_broker(cluster, 102, "", log_retention_ms=None)
    wait_until(
        lambda: "log.retention.ms" not in broker_configs(cluster, 101, ""), 30, "default deleted"
    )
    assert topic_config(admins[101], "retained", "retention.ms") == ("604800000", 5)


def test_one_broker_s_config_beats_the_default_and_is_described_by_that_broker(
    cluster: ProcessCluster,
) -> None:
    try:
        alter_broker(cluster, 101, "", log_segment_bytes="2048")
        alter_broker(cluster, 101, "101", log_segment_bytes="4096")
        wait_until(
            lambda: broker_configs(cluster, 101, "101")["log.segment.bytes"] == ("4096", 2),
            30,
            "broker 101's own value",  # DYNAMIC_BROKER_CONFIG
        )
        wait_until(
            lambda: broker_configs(cluster, 102, "102")["log.segment.bytes"] == ("2048", 3),
            30,
            "broker 102 has the default",
        )
        # Not another broker's: Kafka's clients ask the broker itself.
        values = {
            "resources": [{"resource_type": 4, "resource_name": "101", "configuration_keys": None}],
            "include_synonyms": False,
            "include_documentation": False,
        }
        (result,) = ask(cluster, 102, 32, 4, values).results
        assert int(result.error_code) == KafkaError.INVALID_REQUEST
        # Read-only broker configs are refused as Kafka refuses them.
        entries = [{"name": "listeners", "config_operation": 0, "value": "SSL://:1"}]
        refused = {
            "resources": [{"resource_type": 4, "resource_name": "101", "configs": entries}],
            "validate_only": False,
        }
        (answer,) = ask(cluster, 101, 44, 1, refused).responses
        assert int(answer.error_code) == KafkaError.INVALID_REQUEST
        assert "Cannot update these configs dynamically: Set(listeners)" in answer.error_message
    finally:
        alter_broker(cluster, 101, "", log_segment_bytes=None)
        alter_broker(cluster, 101, "101", log_segment_bytes=None)


def test_a_cluster_wide_min_insync_replicas_refuses_acks_all(cluster: ProcessCluster) -> None:
    """A topic of one replica: with min.insync.replicas=2 as the cluster-wide default, acks=all
    is NOT_ENOUGH_REPLICAS; deleting the default makes it succeed again."""
    create_topic(cluster, "too-few-replicas")
    producer = Producer(
        ssl_config(cluster) | {"acks": "all", "message.send.max.retries": 0, "linger.ms": 0}
    )
    errors: list[KafkaError | None] = []

    def produce() -> KafkaError | None:
        errors.clear()
        producer.produce("too-few-replicas", b"x", on_delivery=lambda e, _: errors.append(e))
        producer.flush(30)
        return errors[0]

    try:
        alter_broker(cluster, 101, "", min_insync_replicas="2")
        wait_until(
            lambda: topic_config(AdminClient(ssl_config(cluster)), "too-few-replicas",
                                 "min.insync.replicas") == ("2", 3),
            30,
            "the default on broker 101",
        )  # fmt: skip
        error = produce()
        assert error is not None
        assert error.code() == KafkaError.NOT_ENOUGH_REPLICAS
    finally:
        alter_broker(cluster, 101, "", min_insync_replicas=None)
    wait_until(lambda: "min.insync.replicas" not in broker_configs(cluster, 101, ""), 30, "deleted")
    assert produce() is None
