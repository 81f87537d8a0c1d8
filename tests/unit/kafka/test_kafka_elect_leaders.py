"""ElectLeaders (API key 43) on the Kafka listener (broker/kafka/elect_leaders.py): forwarded to
the controller as AdminService/ElectLeaders with the election type (v0: PREFERRED) and the
partitions (null: all), its results grouped by topic; CLUSTER_AUTHORIZATION_FAILED without
ALTER on the cluster, before anything is forwarded; a forwarding failure answers every
partition. The controller's decisions are tested in tests/unit/controller/test_elections.py and
end to end, with Kafka's kafka-leader-election.sh, in
tests/process/test_replication_admin_process.py."""

from __future__ import annotations

from quorum.errors import ErrorCode
from quorum.security.authorization import RequestAuthorization
from tests.unit.kafka.test_kafka_protocol import Harness, image_with_topics

ELECT_LEADERS = 43


def request(version: int, partitions: list[tuple[str, list[int]]] | None) -> dict[str, object]:
    values: dict[str, object] = {
        "topic_partitions": None
        if partitions is None
        else [{"topic": t, "partitions": p} for t, p in partitions],
        "timeout": 30_000,
    }
    if version >= 1:
        values["election_type"] = 1
    return values


def test_forwarded_with_the_type_and_partitions_and_answered_by_topic() -> None:
    harness = Harness(image_with_topics())
    response = harness.ask(ELECT_LEADERS, 2, request(2, [("orders", [0, 2]), ("payments", [1])]))
    ((method, forwarded, _),) = harness.controller.calls
    assert method == "ElectLeaders"
    assert forwarded.election_type == 1
    assert not forwarded.all_partitions
    assert [(p.topic, p.partition) for p in forwarded.partitions] == [
        ("orders", 0),
        ("orders", 2),
        ("payments", 1),
    ]
    assert int(response.error_code) == 0
    assert [
        (r.topic, [(p.partition_id, int(p.error_code)) for p in r.partition_result])
        for r in response.replica_election_results
    ] == [("orders", [(0, 0), (2, 0)]), ("payments", [(1, 0)])]


def test_v0_is_a_preferred_election_and_null_means_all_partitions() -> None:
    harness = Harness(image_with_topics())
    harness.ask(ELECT_LEADERS, 0, request(0, None))
    ((_, forwarded, _),) = harness.controller.calls
    assert forwarded.election_type == 0
    assert forwarded.all_partitions
    assert list(forwarded.partitions) == []


def test_without_alter_on_the_cluster_nothing_is_forwarded() -> None:
    harness = Harness(
        image_with_topics(), authorization=RequestAuthorization(enabled=True, cluster_id="c")
    )
    response = harness.ask(ELECT_LEADERS, 2, request(2, [("orders", [1])]))
    assert harness.controller.calls == []
    assert int(response.error_code) == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    ((result,),) = [r.partition_result for r in response.replica_election_results]
    assert int(result.error_code) == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert "needs ALTER on the cluster" in (result.error_message or "")


def test_a_forwarding_failure_answers_every_partition() -> None:
    harness = Harness(image_with_topics())
    harness.controller.down = True
    response = harness.ask(ELECT_LEADERS, 1, request(1, [("orders", [0, 1])]))
    assert int(response.error_code) == ErrorCode.NOT_CONTROLLER
    ((r,),) = [response.replica_election_results]
    assert [(p.partition_id, int(p.error_code)) for p in r.partition_result] == [
        (0, ErrorCode.NOT_CONTROLLER),
        (1, ErrorCode.NOT_CONTROLLER),
    ]
