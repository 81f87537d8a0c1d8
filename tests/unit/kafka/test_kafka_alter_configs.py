"""IncrementalAlterConfigs (44) and AlterConfigs (33) on the Kafka listener
(broker/kafka/alter_configs.py): forwarded as AdminService/AlterConfigs with each config's op
(AlterConfigs: SET, incremental false), answered per resource. Behind the forwarder, the
controller's own ``alter_configs`` decides, through the wire translation
(quorum/wire/alter_configs.py); its cases are in tests/unit/controller/test_alter_configs.py."""

from __future__ import annotations

from typing import Any

from quorum.controller.alter_configs import alter_configs
from quorum.errors import ErrorCode
from quorum.metadata.image import MetadataImage
from quorum.rpc.v1 import admin_pb2
from quorum.security.identity import Caller
from quorum.wire.alter_configs import (
    add_alter_configs_results,
    alter_configs_from_proto,
    alter_configs_results_from_proto,
    alter_configs_to_proto,
)
from tests.unit.kafka.test_kafka_protocol import Controller, Harness, image_with_topics

ALTER_CONFIGS = 33
INCREMENTAL_ALTER_CONFIGS = 44
TOPIC = 2


class DecidingController(Controller):
    """Answers AlterConfigs with the controller's decision on ``image`` (no records applied)."""

    def __init__(self, image: MetadataImage) -> None:
        super().__init__()
        self.image = image

    async def call(self, method: str, request: Any, caller: Caller, timeout_ms: int) -> Any:
        if method != "AlterConfigs" or self.down:
            return await super().call(method, request, caller, timeout_ms)
        self.calls.append((method, request, caller))
        result = alter_configs(self.image, alter_configs_from_proto(request))
        response = admin_pb2.AlterConfigsResponse(metadata_offset=self.offset)
        add_alter_configs_results(response, result.response.results)
        return response


def harness() -> Harness:
    image = image_with_topics()
    return Harness(image, controller=DecidingController(image))


def incremental(*resources: tuple[str, list[tuple[str, int, str | None]]]) -> dict[str, Any]:
    return {
        "resources": [
            {
                "resource_type": TOPIC,
                "resource_name": name,
                "configs": [
                    {"name": k, "config_operation": op, "value": v} for k, op, v in configs
                ],
            }
            for name, configs in resources
        ],
        "validate_only": False,
    }


def answers(response: Any) -> list[tuple[str, int, str]]:
    return [(r.resource_name, int(r.error_code), r.error_message or "") for r in response.responses]


def test_incremental_is_forwarded_with_ops_and_answered_per_resource() -> None:
    h = harness()
    response = h.ask(
        INCREMENTAL_ALTER_CONFIGS,
        1,
        incremental(
            ("orders", [("retention.ms", 0, "100"), ("segment.ms", 1, None)]),
            ("payments", [("retention.ms", 2, "5")]),
            ("nope", [("retention.ms", 0, "1")]),
        ),
    )
    ((method, forwarded, _),) = h.controller.calls
    assert method == "AlterConfigs" and forwarded.incremental and not forwarded.validate_only
    assert [(c.name, c.op, c.HasField("value")) for c in forwarded.resources[0].configs] == [
        ("retention.ms", 0, True),
        ("segment.ms", 1, False),
    ]
    got = answers(response)
    assert got[0] == ("orders", 0, "")
    assert got[1][:2] == ("payments", ErrorCode.INVALID_REQUEST)
    assert "APPEND is only for list-typed configs" in got[1][2]
    assert got[2] == ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "Topic 'nope' does not exist")


def test_invalid_config_names_the_key_and_what_is_allowed() -> None:
    h = harness()
    response = h.ask(
        INCREMENTAL_ALTER_CONFIGS, 0, incremental(("orders", [("retention.ms", 0, "soon")]))
    )
    ((_, code, message),) = answers(response)
    assert code == ErrorCode.INVALID_CONFIG
    assert "retention.ms" in message and "must be a long in [-1," in message


def test_legacy_alter_configs_is_forwarded_as_not_incremental() -> None:
    h = harness()
    response = h.ask(
        ALTER_CONFIGS,
        2,
        {
            "resources": [
                {
                    "resource_type": TOPIC,
                    "resource_name": "orders",
                    "configs": [{"name": "cleanup.policy", "value": "compact"}],
                }
            ],
            "validate_only": True,
        },
    )
    ((_, forwarded, _),) = h.controller.calls
    assert not forwarded.incremental and forwarded.validate_only
    assert [(c.name, c.op, c.value) for c in forwarded.resources[0].configs] == [
        ("cleanup.policy", 0, "compact")
    ]
    assert answers(response) == [("orders", 0, "")]


def test_a_forwarding_failure_answers_every_resource() -> None:
    h = harness()
    h.controller.down = True
    response = h.ask(
        INCREMENTAL_ALTER_CONFIGS,
        1,
        incremental(("orders", [("retention.ms", 0, "1")]), ("payments", [])),
    )
    assert [(n, c) for n, c, _ in answers(response)] == [
        ("orders", ErrorCode.NOT_CONTROLLER),
        ("payments", ErrorCode.NOT_CONTROLLER),
    ]


def test_wire_translation_round_trips() -> None:
    pb = admin_pb2.AlterConfigsRequest(validate_only=True, incremental=True)
    resource = pb.resources.add(resource_type=TOPIC, resource_name="t")
    resource.configs.add(name="a", op=1)
    resource.configs.add(name="b", op=0, value="")
    request = alter_configs_from_proto(pb)
    assert [c.value for c in request.resources[0].configs] == [None, ""]
    assert alter_configs_to_proto(request) == pb
    result = alter_configs(image_with_topics(), request)
    response = admin_pb2.AlterConfigsResponse()
    add_alter_configs_results(response, result.response.results)
    assert alter_configs_results_from_proto(response) == result.response


def test_a_broker_resource_of_another_broker_is_refused_here_and_the_rest_forwarded() -> None:
    """Kafka's brokers refuse another broker's resource (its clients send it to that broker):
    INVALID_REQUEST, not forwarded; this broker's (id 1) and the default are forwarded."""
    h = harness()

    def broker(name: str) -> dict[str, Any]:
        return {
            "resource_type": 4,
            "resource_name": name,
            "configs": [{"name": "log.retention.ms", "config_operation": 0, "value": "1000"}],
        }

    values = {
        "resources": [broker("2"), broker("1"), broker(""), broker("x")],
        "validate_only": False,
    }
    answer = h.ask(INCREMENTAL_ALTER_CONFIGS, 1, values)
    codes = [(r.resource_name, int(r.error_code)) for r in answer.responses]
    assert codes == [
        ("2", ErrorCode.INVALID_REQUEST),
        ("1", ErrorCode.NONE),
        ("", ErrorCode.NONE),
        ("x", ErrorCode.INVALID_REQUEST),
    ]
    assert "Unexpected broker id, expected 1, but received 2" in answer.responses[0].error_message
    assert "Broker id must be an integer, but it is: x" in answer.responses[3].error_message
    ((_, forwarded, _),) = h.controller.calls
    assert [r.resource_name for r in forwarded.resources] == ["1", ""]
