"""DescribeConfigs on the Kafka listener (broker/kafka/describe_configs.py): topic and broker
resources, Kafka's sources and synonyms, the precedence of dynamic, cluster-wide, static and
default values, sensitive and read-only flags, and DESCRIBE_CONFIGS."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import structlog

from broker.kafka.apis import KafkaApis
from broker.kafka.data_plane import DataPlane
from broker.kafka.server import KafkaListenerServer
from quorum.config_load import config_from_settings
from quorum.errors import ErrorCode
from quorum.ids import Uuid
from quorum.metadata.delta import replay_records
from quorum.metadata.image import MetadataImage
from quorum.metadata.records import AccessControlEntryRecord, ConfigRecord
from quorum.security.acls import AclOperation
from quorum.security.authorization import RequestAuthorization
from quorum.security.identity import CallerResolver
from tests.unit.kafka.test_kafka_protocol import LISTENER, Harness, image_with_topics

BROKER, TOPIC = 4, 2
# Kafka's config sources
TOPIC_CONFIG, DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT = 1, 2, 3, 4, 5

NODE = config_from_settings(
    {
        "node.id": 1,
        "process.roles": ["broker"],
        "controller.quorum.voters": ["9@127.0.0.1:9093"],
        "listeners": ["BROKER://127.0.0.1:19001"],
        "log.dirs": ["/var/lib/mq/logs"],
        "log.retention.hours": 24,
        "log.segment.bytes": 4096,
        "ssl.keystore.key": "-----BEGIN PRIVATE KEY-----secret",
        "ssl.keystore.certificate.chain": "-----BEGIN CERTIFICATE-----x",
        "listener.security.protocol.map": "BROKER:PLAINTEXT",
    },
    base_dir=Path("/"),
)


class ConfigHarness(Harness):
    def __init__(self, image: MetadataImage, authorization: RequestAuthorization | None = None):
        super().__init__(image, authorization=authorization)
        self.apis = KafkaApis(
            broker_id=1,
            cluster_id="MkU3OEVBNTcwNTJENDM2Qg",
            image=lambda: self.image,
            authorization=authorization or RequestAuthorization.disabled(),
            forwarder=self.controller,
            wait_applied=self._wait_applied,
            node_config=NODE,
        )
        self.server = KafkaListenerServer(
            LISTENER, self.apis, CallerResolver(), tls=None, logger=structlog.get_logger()
        )


def with_configs(*records: ConfigRecord, image: MetadataImage | None = None) -> MetadataImage:
    base = image or image_with_topics()
    return replay_records(base, ((base.offset + 1 + i, r) for i, r in enumerate(records)))


def describe(
    harness: Harness,
    resource_type: int,
    name: str,
    keys: list[str] | None = None,
    *,
    version: int = 4,
    documentation: bool = False,
) -> Any:
    values: dict[str, Any] = {
        "resources": [
            {"resource_type": resource_type, "resource_name": name, "configuration_keys": keys}
        ],
        "include_synonyms": True,
    }
    if version >= 3:
        values["include_documentation"] = documentation
    (result,) = harness.ask(32, version, values).results
    return result


def entries(result: Any) -> dict[str, Any]:
    assert int(result.error_code) == 0, result.error_message
    return {c.name: c for c in result.configs}


def synonyms(entry: Any) -> list[tuple[int, str, str | None]]:
    return [(s.source, s.name, s.value) for s in entry.synonyms]


def test_topic_configs_fall_back_to_the_broker_s_file_then_kafka_s_defaults() -> None:
    harness = ConfigHarness(image_with_topics())
    configs = entries(describe(harness, TOPIC, "orders"))
    assert (configs["retention.ms"].value, configs["retention.ms"].config_source) == ("1000", 1)
    # retention.ms's synonym log.retention.ms is set nowhere: Kafka drops the .hours ones.
    assert synonyms(configs["retention.ms"]) == [(TOPIC_CONFIG, "retention.ms", "1000")]
    segment = configs["segment.bytes"]
    assert (segment.value, segment.config_source) == ("4096", STATIC)
    assert synonyms(segment) == [
        (STATIC, "log.segment.bytes", "4096"),
        (DEFAULT, "log.segment.bytes", "1073741824"),
    ]
    assert (configs["cleanup.policy"].value, configs["cleanup.policy"].config_source) == (
        "delete",
        DEFAULT,
    )
    payments = entries(describe(harness, TOPIC, "payments", ["retention.ms"]))
    # log.retention.hours=24 in the file: 86400000, source DEFAULT_CONFIG as Kafka reports it.
    assert list(payments) == ["retention.ms"]
    assert (payments["retention.ms"].value, payments["retention.ms"].config_source) == (
        "86400000",
        DEFAULT,
    )


def test_a_topic_uses_this_broker_s_dynamic_value_then_the_cluster_default() -> None:
    image = with_configs(
        ConfigRecord(BROKER, "", "log.retention.ms", "5000"),
        ConfigRecord(BROKER, "", "min.insync.replicas", "2"),
        ConfigRecord(BROKER, "1", "log.retention.ms", "3000"),
        ConfigRecord(BROKER, "2", "min.insync.replicas", "3"),  # another broker's: not ours
    )
    configs = entries(describe(ConfigHarness(image), TOPIC, "payments"))
    retention = configs["retention.ms"]
    assert (retention.value, retention.config_source) == ("3000", DYNAMIC_BROKER)
    assert synonyms(retention) == [
        (DYNAMIC_BROKER, "log.retention.ms", "3000"),
        (DYNAMIC_DEFAULT, "log.retention.ms", "5000"),
        (STATIC, "log.retention.hours", "24"),
        (DEFAULT, "log.retention.hours", "168"),
    ]
    isr = configs["min.insync.replicas"]
    assert (isr.value, isr.config_source) == ("2", DYNAMIC_DEFAULT)
    assert synonyms(isr) == [
        (DYNAMIC_DEFAULT, "min.insync.replicas", "2"),
        (DEFAULT, "min.insync.replicas", "1"),
    ]


def test_this_broker_s_configs_with_sources_flags_and_documentation() -> None:
    image = with_configs(
        ConfigRecord(BROKER, "", "log.retention.ms", "5000"),
        ConfigRecord(BROKER, "1", "log.segment.bytes", "8192"),
    )
    result = describe(ConfigHarness(image), BROKER, "1", documentation=True)
    configs = entries(result)
    segment = configs["log.segment.bytes"]
    assert (segment.value, segment.config_source, segment.read_only) == ("8192", 2, False)
    assert synonyms(segment) == [
        (DYNAMIC_BROKER, "log.segment.bytes", "8192"),
        (STATIC, "log.segment.bytes", "4096"),
        (DEFAULT, "log.segment.bytes", "1073741824"),
    ]
    assert segment.config_type == 3  # INT
    retention = configs["log.retention.ms"]
    assert (retention.value, retention.config_source, retention.config_type) == ("5000", 3, 5)
    hours = configs["log.retention.hours"]
    # Kafka drops the leading synonyms of other names (the dynamic default log.retention.ms).
    assert synonyms(hours) == [
        (STATIC, "log.retention.hours", "24"),
        (DEFAULT, "log.retention.hours", "168"),
    ]
    node_id = configs["node.id"]
    assert (node_id.value, node_id.read_only, node_id.config_source) == ("1", True, STATIC)
    assert node_id.documentation and "id" in node_id.documentation
    key = configs["ssl.keystore.key"]
    assert (key.value, key.is_sensitive, key.config_type) == (None, True, 9)  # PASSWORD
    assert [s.value for s in key.synonyms] == [None]
    rack = configs["broker.rack"]
    assert (rack.value, rack.config_source) == (None, DEFAULT)
    assert configs["unclean.leader.election.enable"].config_type == 1  # BOOLEAN


def test_the_cluster_default_lists_only_what_is_set() -> None:
    image = with_configs(
        ConfigRecord(BROKER, "", "log.retention.ms", "5000"),
        ConfigRecord(BROKER, "1", "log.segment.bytes", "8192"),
    )
    configs = entries(describe(ConfigHarness(image), BROKER, ""))
    assert list(configs) == ["log.retention.ms"]
    assert configs["log.retention.ms"].config_source == DYNAMIC_DEFAULT
    assert synonyms(configs["log.retention.ms"]) == [(DYNAMIC_DEFAULT, "log.retention.ms", "5000")]


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("2", "Unexpected broker id, expected 1 or empty string, but received 2"),
        ("x", "Broker id must be an integer, but it is: x"),
    ],
)
def test_another_broker_or_no_id_is_invalid_request(name: str, text: str) -> None:
    result = describe(ConfigHarness(image_with_topics()), BROKER, name)
    assert int(result.error_code) == ErrorCode.INVALID_REQUEST
    assert text in result.error_message


def test_other_resource_types_are_invalid_request() -> None:
    result = describe(ConfigHarness(image_with_topics()), 8, "x")
    assert int(result.error_code) == ErrorCode.INVALID_REQUEST


def test_v0_like_versions_report_is_default() -> None:
    configs = entries(describe(ConfigHarness(image_with_topics()), TOPIC, "orders", version=1))
    assert configs["cleanup.policy"].config_source == DEFAULT


def test_describe_configs_needs_describe_configs_or_alter_configs() -> None:
    def grant(operation: AclOperation, resource_type: int, name: str) -> AccessControlEntryRecord:
        return AccessControlEntryRecord(
            Uuid.random(), resource_type, name, 3, "User:CN=alice", "*", int(operation), 3
        )

    authorization = RequestAuthorization(enabled=True, cluster_id="c")
    plain = image_with_topics()
    harness = ConfigHarness(plain, authorization)
    harness_session = harness.session("User:CN=alice")

    def ask(resource_type: int, name: str) -> Any:
        (result,) = harness.ask(
            32,
            4,
            {
                "resources": [
                    {
                        "resource_type": resource_type,
                        "resource_name": name,
                        "configuration_keys": None,
                    }
                ],
                "include_synonyms": False,
                "include_documentation": False,
            },
            harness_session,
        ).results
        return result

    assert int(ask(TOPIC, "orders").error_code) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert "DESCRIBE_CONFIGS" in ask(TOPIC, "orders").error_message
    assert int(ask(BROKER, "1").error_code) == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    # DESCRIBE on the topic is not enough (Kafka's rule); ALTER_CONFIGS implies it.
    harness.image = replay_records(
        plain,
        enumerate(
            [
                grant(AclOperation.DESCRIBE, 2, "orders"),
                grant(AclOperation.ALTER_CONFIGS, 2, "payments"),
                grant(AclOperation.DESCRIBE_CONFIGS, 4, "kafka-cluster"),
            ],
            start=plain.offset + 1,
        ),
    )
    assert int(ask(TOPIC, "orders").error_code) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert int(ask(TOPIC, "payments").error_code) == ErrorCode.NONE
    assert int(ask(BROKER, "1").error_code) == ErrorCode.NONE


def test_the_data_plane_applies_a_broker_or_topic_config_change_at_once() -> None:
    """The log config of a topic follows the image: a new dynamic broker default or topic
    config is what the next append, fetch or retention check sees (no restart, no reopen)."""
    image = image_with_topics()
    data = DataPlane(
        None, broker_id=1, image=lambda: image, static_configs={"log.retention.ms": "9"}
    )
    try:
        payments = image.topic_by_name("payments")
        assert payments is not None
        assert data.config(payments).retention_ms == 9
        image = with_configs(ConfigRecord(BROKER, "", "log.retention.ms", "5"), image=image)
        assert data.config(payments).retention_ms == 5
        image = with_configs(ConfigRecord(BROKER, "1", "min.insync.replicas", "2"), image=image)
        assert data.config(payments).min_insync_replicas == 2
        image = with_configs(ConfigRecord(TOPIC, "payments", "retention.ms", "77"), image=image)
        payments = image.topic_by_name("payments")
        assert payments is not None
        assert data.config(payments).retention_ms == 77
    finally:
        data.close()
