"""A write a broker forwards while no controller leads (broker/controller_client.py): held
until a controller is active again, within its deadline, as Kafka's forwarding holds it, and
not answered NOT_CONTROLLER at once (the client would then wait its own retry backoff)."""

from __future__ import annotations

import datetime
import threading
from pathlib import Path
from typing import Any

from kio.schema.create_topics.v5.request import CreatableTopic, CreateTopicsRequest
from kio.schema.types import TopicName
from kio.static.primitive import i16, i32, i32Timedelta

from quorum.errors import ErrorCode
from quorum.harness import process_cluster, wait_for_unfenced_broker, wait_until
from quorum.kafka_wire import KafkaWire
from tests.process.test_kafka_data_process import listening


def test_forwarded_create_waits_for_the_next_active_controller(tmp_path: Path) -> None:
    """Two of the three controllers are killed (no majority: no controller can lead) before a
    client sends CreateTopics to the broker, then started again: the broker's answer is the
    new controller's success, not NOT_CONTROLLER."""
    with process_cluster(
        tmp_path, brokers=1, kafka_listeners={"KAFKA": "PLAINTEXT"}, security="plaintext"
    ) as cluster:
        cluster.format()
        cluster.start_all()
        leader, _, _ = cluster.wait_for_leader(timeout_s=30)
        broker = cluster.nodes[101]
        wait_until(lambda: listening(broker.kafka_address("KAFKA")), 60, "the Kafka listener")
        with cluster.admin() as admin:
            wait_for_unfenced_broker(admin, "broker 101 unfenced")
        follower = next(n for n in cluster.controller_ids if n != leader)
        stopped = [leader, follower]
        for node in stopped:
            cluster.kill(node)
        request = CreateTopicsRequest(
            topics=(
                CreatableTopic(
                    name=TopicName("held"),
                    num_partitions=i32(1),
                    replication_factor=i16(1),
                    assignments=(),
                    configs=(),
                ),
            ),
            timeout=i32Timedelta.parse(datetime.timedelta(seconds=20)),
        )
        answers: list[Any] = []
        failures: list[BaseException] = []

        def ask() -> None:
            try:
                with KafkaWire(broker.kafka_address("KAFKA"), None, timeout_s=40) as wire:
                    answers.append(wire.ask(request))
            except BaseException as exc:  # reported by the assertion below
                failures.append(exc)

        client = threading.Thread(target=ask, name="create-topics")
        client.start()
        for node in stopped:
            cluster.start(node)
        client.join(timeout=45)
        assert not client.is_alive(), "no answer from the broker within 45 s"
        assert not failures, failures
        (topic,) = answers[0].topics
        assert topic.error_code == ErrorCode.NONE, (topic.error_code, topic.error_message)
        assert cluster.leader() is not None
