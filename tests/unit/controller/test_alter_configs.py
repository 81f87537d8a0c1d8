"""IncrementalAlterConfigs / AlterConfigs on topics (quorum/controller/alter_configs.py),
driven through the controller state machine as the server's driver would."""

from __future__ import annotations

from typing import Any

import pytest

from quorum.controller.alter_configs import (
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsRequest,
    AlterConfigsResource,
    AlterConfigsResponse,
    AlterConfigsResult,
)
from quorum.controller.requests import DeleteTopic
from quorum.controller.result import ControllerResult
from quorum.errors import ErrorCode
from quorum.metadata.records import ConfigRecord, ConfigResourceType
from tests.unit.controller.test_controller_topics import Harness

TOPIC = ConfigResourceType.TOPIC
BROKER = ConfigResourceType.BROKER
SET, DELETE, APPEND, SUBTRACT = (
    AlterConfigOp.SET,
    AlterConfigOp.DELETE,
    AlterConfigOp.APPEND,
    AlterConfigOp.SUBTRACT,
)


@pytest.fixture
def h() -> Harness:
    h = Harness()
    assert h.create_one("t", partitions=2, rf=3).error_code == ErrorCode.NONE
    return h


def result_of(
    h: Harness,
    *configs: tuple[str, int, str | None],
    name: str = "t",
    incremental: bool = True,
    validate_only: bool = False,
) -> ControllerResult[AlterConfigsResponse]:
    resource = AlterConfigsResource(
        TOPIC, name, tuple(AlterableConfig(k, op, v) for k, op, v in configs)
    )
    return h.sm.alter_configs(
        AlterConfigsRequest((resource,), validate_only=validate_only, incremental=incremental),
        next_offset=h.next_offset,
    )


def alter(h: Harness, *configs: tuple[str, int, str | None], **kw: Any) -> AlterConfigsResult:
    (result,) = h.propose(result_of(h, *configs, **kw)).results
    return result


def refused(h: Harness, *configs: tuple[str, int, str | None], **kw: Any) -> tuple[int, str]:
    response = h.expect_refused(lambda: result_of(h, *configs, **kw))
    (result,) = response.results
    assert result.error_code != ErrorCode.NONE
    return result.error_code, result.error_message or ""


def configs(h: Harness, name: str = "t") -> dict[str, str]:
    topic = h.sm.latest_image.topic_by_name(name)
    assert topic is not None
    return dict(topic.configs)


def test_set_records_normalised_values_and_replays(h: Harness) -> None:
    result = result_of(h, ("retention.ms", SET, "+0100"), ("compression.type", SET, "ZSTD"))
    assert result.records == (
        ConfigRecord(TOPIC, "t", "compression.type", "zstd"),
        ConfigRecord(TOPIC, "t", "retention.ms", "100"),
    )
    assert result.is_atomic
    assert h.propose(result).results == (AlterConfigsResult(TOPIC, "t"),)
    assert configs(h) == {"compression.type": "zstd", "retention.ms": "100"}
    h.check_replay()


def test_delete_is_a_config_record_with_a_null_value(h: Harness) -> None:
    alter(h, ("retention.ms", SET, "100"), ("segment.ms", SET, "5"))
    result = result_of(h, ("retention.ms", DELETE, None))
    assert result.records == (ConfigRecord(TOPIC, "t", "retention.ms", None),)
    h.propose(result)
    assert configs(h) == {"segment.ms": "5"}
    h.check_replay()


def test_unchanged_values_write_nothing(h: Harness) -> None:
    alter(h, ("retention.ms", SET, "100"))
    result = result_of(h, ("retention.ms", SET, "100"), ("segment.ms", DELETE, None))
    assert result.records == ()
    assert result.response.results == (AlterConfigsResult(TOPIC, "t"),)


def test_append_and_subtract_start_from_the_default(h: Harness) -> None:
    alter(h, ("cleanup.policy", APPEND, "Compact"))
    assert configs(h) == {"cleanup.policy": "delete,compact"}
    alter(h, ("cleanup.policy", APPEND, "delete"))
    assert configs(h) == {"cleanup.policy": "delete,compact"}
    alter(h, ("cleanup.policy", SUBTRACT, "delete"))
    assert configs(h) == {"cleanup.policy": "compact"}
    h.check_replay()


def test_subtracting_every_policy_is_invalid_config(h: Harness) -> None:
    code, message = refused(h, ("cleanup.policy", SUBTRACT, "delete"))
    assert code == ErrorCode.INVALID_CONFIG
    assert "cleanup.policy" in message and "delete and compact" in message


@pytest.mark.parametrize("op", [APPEND, SUBTRACT])
def test_list_ops_on_a_scalar_config_are_invalid_request(h: Harness, op: int) -> None:
    code, message = refused(h, ("retention.ms", op, "5"))
    assert code == ErrorCode.INVALID_REQUEST
    assert "retention.ms" in message and "cleanup.policy" in message and "SET or DELETE" in message


@pytest.mark.parametrize(
    ("config", "text"),
    [
        (("nope", SET, "1"), "Unknown topic config name: 'nope' (supported: cleanup.policy"),
        (("nope", DELETE, None), "Unknown topic config name: 'nope'"),
        (("retention.ms", SET, "-2"), "retention.ms: must be a long in [-1,"),
        (("retention.ms", SET, None), "Null value not supported for topic configs: retention.ms"),
        (("internal", SET, "true"), "fixed when the topic is created"),
        (("min.insync.replicas", SET, "4"), "more than the replication factor 3"),
    ],
)
def test_bad_configs_are_invalid_config(
    h: Harness, config: tuple[str, int, str | None], text: str
) -> None:
    code, message = refused(h, config)
    assert code == ErrorCode.INVALID_CONFIG
    assert text in message


def test_unknown_topic(h: Harness) -> None:
    code, message = refused(h, ("retention.ms", SET, "1"), name="nope")
    assert (code, message) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "Topic 'nope' does not exist")


def test_deleted_topic_is_unknown(h: Harness) -> None:
    h.delete(DeleteTopic(name="t"))
    code, _ = refused(h, ("retention.ms", SET, "1"))
    assert code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_unknown_op_and_duplicate_key_are_invalid_request(h: Harness) -> None:
    code, message = refused(h, ("retention.ms", 7, "1"))
    assert code == ErrorCode.INVALID_REQUEST and "Unknown operation 7" in message
    code, message = refused(h, ("retention.ms", SET, "1"), ("retention.ms", DELETE, None))
    assert code == ErrorCode.INVALID_REQUEST and "duplicate config keys: 'retention.ms'" in message


def test_validate_only_answers_without_records(h: Harness) -> None:
    result = result_of(h, ("retention.ms", SET, "1"), validate_only=True)
    assert result.records == ()
    assert result.response.results == (AlterConfigsResult(TOPIC, "t"),)
    code, _ = refused(h, ("retention.ms", SET, "x"), validate_only=True)
    assert code == ErrorCode.INVALID_CONFIG


def test_a_resource_named_twice_is_invalid_request_and_others_proceed(h: Harness) -> None:
    assert h.create_one("u").error_code == ErrorCode.NONE
    one = AlterConfigsResource(TOPIC, "t", (AlterableConfig("retention.ms", SET, "1"),))
    other = AlterConfigsResource(TOPIC, "u", (AlterableConfig("retention.ms", SET, "2"),))
    response = h.propose(
        h.sm.alter_configs(AlterConfigsRequest((one, other, one)), next_offset=h.next_offset)
    )
    codes = [r.error_code for r in response.results]
    assert codes == [ErrorCode.INVALID_REQUEST, ErrorCode.NONE, ErrorCode.INVALID_REQUEST]
    assert "named more than once" in (response.results[0].error_message or "")
    assert configs(h) == {} and configs(h, "u") == {"retention.ms": "2"}


def cluster_result(
    h: Harness, *configs: tuple[str, int, str | None], name: str = "", incremental: bool = True
) -> ControllerResult[AlterConfigsResponse]:
    resource = AlterConfigsResource(
        BROKER, name, tuple(AlterableConfig(k, op, v) for k, op, v in configs)
    )
    return h.sm.alter_configs(
        AlterConfigsRequest((resource,), incremental=incremental), next_offset=h.next_offset
    )


def cluster_refused(h: Harness, *configs: tuple[str, int, str | None], name: str = "") -> Any:
    (result,) = h.expect_refused(lambda: cluster_result(h, *configs, name=name)).results
    return result.error_code, result.error_message or ""


def test_the_cluster_default_is_set_and_deleted_as_a_broker_config(h: Harness) -> None:
    result = cluster_result(h, ("unclean.leader.election.enable", SET, "TRUE"))
    assert result.records == (ConfigRecord(BROKER, "", "unclean.leader.election.enable", "true"),)
    h.propose(result)
    assert dict(h.sm.latest_image.cluster_configs) == {"unclean.leader.election.enable": "true"}
    result = cluster_result(h, ("unclean.leader.election.enable", DELETE, None))
    assert result.records == (ConfigRecord(BROKER, "", "unclean.leader.election.enable", None),)
    h.propose(result)
    assert dict(h.sm.latest_image.cluster_configs) == {}
    h.check_replay()


@pytest.mark.parametrize(
    ("config", "name", "code", "text"),
    [
        (("unclean.leader.election.enable", SET, "1"), "x", ErrorCode.INVALID_REQUEST,
         "Invalid broker name 'x': a broker resource is named by a broker id"),
        (("unclean.leader.election.enable", SET, "1"), "-1", ErrorCode.INVALID_REQUEST,
         "Invalid broker name '-1'"),
        (("log.retention.ms", SET, "1"), "0101", ErrorCode.INVALID_REQUEST,
         "Invalid broker name '0101'"),
        (("unclean.leader.election.enable", SET, "yes"), "", ErrorCode.INVALID_CONFIG,
         "Invalid value 'yes' for configuration unclean.leader.election.enable: must be true"),
        (("unclean.leader.election.enable", SET, None), "", ErrorCode.INVALID_CONFIG,
         "Null value not supported for broker configs"),
        (("log.retention.ms", SET, "soon"), "101", ErrorCode.INVALID_CONFIG,
         "Invalid value 'soon' for configuration log.retention.ms: must be a long in [-1, "),
        (("log.segment.bytes", SET, "13"), "", ErrorCode.INVALID_CONFIG,
         "Invalid value '13' for configuration log.segment.bytes: must be an int in [14, "),
        (("min.insync.replicas", SET, "0"), "101", ErrorCode.INVALID_CONFIG,
         "Invalid value '0' for configuration min.insync.replicas: must be an int in [1, "),
        (("retention.ms", SET, "1"), "", ErrorCode.INVALID_REQUEST,
         "Cannot update these configs dynamically: Set(retention.ms); the broker configs "
         "that can change live here: log.retention.bytes, log.retention.hours"),
        (("listeners", SET, "SSL://:9093"), "101", ErrorCode.INVALID_REQUEST,
         "Cannot update these configs dynamically: Set(listeners)"),
        (("node.id", DELETE, None), "101", ErrorCode.INVALID_REQUEST,
         "Cannot update these configs dynamically: Set(node.id)"),
        (("unclean.leader.election.enable", APPEND, "true"), "", ErrorCode.INVALID_REQUEST,
         "APPEND is only for list-typed configs"),
    ],
)  # fmt: skip
def test_bad_broker_configs(
    h: Harness, config: tuple[str, int, str | None], name: str, code: ErrorCode, text: str
) -> None:
    assert cluster_refused(h, config, name=name)[0] == code
    assert text in cluster_refused(h, config, name=name)[1]


def test_one_broker_s_configs_are_set_and_deleted_apart_from_the_default(h: Harness) -> None:
    h.propose(cluster_result(h, ("log.retention.ms", SET, "+0100"), name="101"))
    h.propose(
        cluster_result(h, ("log.retention.hours", SET, "2"), ("min.insync.replicas", SET, "2"))
    )
    assert dict(h.sm.latest_image.broker_configs["101"]) == {"log.retention.ms": "100"}
    assert dict(h.sm.latest_image.cluster_configs) == {
        "log.retention.hours": "2",
        "min.insync.replicas": "2",
    }
    # Nothing changes: nothing written.
    assert cluster_result(h, ("log.retention.ms", SET, "100"), name="101").records == ()
    # A broker that is not registered may be configured (as Kafka's).
    h.propose(cluster_result(h, ("log.segment.bytes", SET, "1024"), name="7"))
    result = cluster_result(h, ("log.retention.ms", DELETE, None), name="101")
    assert result.records == (ConfigRecord(BROKER, "101", "log.retention.ms", None),)
    h.propose(result)
    assert "101" not in h.sm.latest_image.broker_configs
    assert dict(h.sm.latest_image.broker_configs["7"]) == {"log.segment.bytes": "1024"}
    h.check_replay()


def test_other_resource_types_are_invalid_request(h: Harness) -> None:
    resource = AlterConfigsResource(8, "x", ())
    response = h.expect_refused(
        lambda: h.sm.alter_configs(AlterConfigsRequest((resource,)), next_offset=h.next_offset)
    )
    assert response.results[0].error_code == ErrorCode.INVALID_REQUEST
    assert "only TOPIC (2) and BROKER (4" in (response.results[0].error_message or "")


def test_legacy_alter_configs_replaces_the_whole_set(h: Harness) -> None:
    alter(h, ("retention.ms", SET, "100"), ("segment.ms", SET, "5"))
    # AlterConfigs ignores the op: everything given is set, the rest deleted.
    result = result_of(h, ("segment.ms", DELETE, "6"), incremental=False)
    assert result.records == (
        ConfigRecord(TOPIC, "t", "retention.ms", None),
        ConfigRecord(TOPIC, "t", "segment.ms", "6"),
    )
    h.propose(result)
    assert configs(h) == {"segment.ms": "6"}
    h.check_replay()
