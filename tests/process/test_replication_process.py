"""Replication between brokers on real processes (docs/replication.md): 3 controllers and 3
brokers over mTLS, each broker with an SSL Kafka listener.

- The leader of an RF 3 topic killed, stopped or cut off under acks=all is the fault suite's
  (tests/faults/test_replication_faults.py, which uses the helpers here).
- The seed's scenario on data: broker 102 down, ``orders`` (RF 2) deleted, created again and
  written to; 102 back: it moves the old incarnation aside, fetches the new one from offset 0 by
  its new id, and its copy is the leader's, byte for byte.
- A follower's Fetch that is not allowed or not right is refused with Kafka's error.
"""

from __future__ import annotations

import contextlib
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from quorum.admin import TopicCollection
from quorum.harness import ProcessCluster, process_cluster, wait_until
from tests.kafka_raw import RawConnection
from tests.process.test_kafka_data_process import listening, produce_raw
from tests.record_batches import Record, encode_batch

BROKERS = (101, 102, 103)
SESSION_TIMEOUT_MS = 9_000  # Kafka's default broker.session.timeout.ms


def client(cluster: ProcessCluster, brokers: tuple[int, ...] = BROKERS) -> dict[str, Any]:
    assert cluster.certs is not None
    keystore = str(cluster.certs.client_keystore("admin"))
    return {
        "bootstrap.servers": ",".join(cluster.nodes[b].kafka_address("KAFKA") for b in brokers),
        "security.protocol": "SSL",
        "ssl.ca.location": str(cluster.certs.ca),
        "ssl.certificate.location": keystore,
        "ssl.key.location": keystore,
    }


def wait_unfenced(cluster: ProcessCluster, brokers: tuple[int, ...]) -> None:
    for broker_id in brokers:
        address = cluster.nodes[broker_id].kafka_address("KAFKA")
        wait_until(lambda a=address: listening(a), 60, f"Kafka listener {address}")
    with cluster.admin() as admin:
        wait_until(
            lambda: (
                {b.broker_id for b in admin.describe_cluster().brokers if not b.is_fenced}
                >= set(brokers)
            ),
            60,
            f"brokers {brokers} unfenced",
        )


def partitions_of(cluster: ProcessCluster, name: str) -> dict[int, Any]:
    with cluster.admin() as admin:
        described = admin.describe_topics(TopicCollection.of_topic_names([name]))
        return {p.partition: p for p in described.all_topic_names()[name].partitions}


def wait_isr(cluster: ProcessCluster, name: str, isr: set[int], timeout_s: float = 60) -> None:
    wait_until(
        lambda: all(set(p.isr) == isr for p in partitions_of(cluster, name).values()),
        timeout_s,
        f"the ISR of every partition of {name} to be {sorted(isr)}",
    )


def log_bytes(cluster: ProcessCluster, broker_id: int, directory: str) -> bytes:
    """Every segment of a partition directory, in order: the records' bytes as stored."""
    path = cluster.nodes[broker_id].log_dir / directory
    return b"".join(p.read_bytes() for p in sorted(path.glob("*.log")))


def topic_id_on_disk(cluster: ProcessCluster, broker_id: int, directory: str) -> str | None:
    path = cluster.nodes[broker_id].log_dir / directory / "partition.metadata"
    if not path.exists():
        return None
    for line in path.read_text().splitlines():
        if line.startswith("topic_id:"):
            return line.split(":", 1)[1].strip()
    return None


def read_all(settings: dict[str, Any], name: str, partition: int) -> list[tuple[int, bytes]]:
    consumer = Consumer(
        {
            **settings,
            "group.id": f"check-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
        }
    )
    try:
        _, end = consumer.get_watermark_offsets(TopicPartition(name, partition), timeout=20)
        consumer.assign([TopicPartition(name, partition, OFFSET_BEGINNING)])
        read: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 60
        while end > 0 and (not read or read[-1][0] < end - 1) and time.monotonic() < deadline:
            for message in consumer.consume(5_000, 1.0):
                assert message.error() is None, message.error()
                read.append((message.offset(), message.value() or b""))
        return read
    finally:
        consumer.close()


@contextlib.contextmanager
def replicating_cluster(tmp_path: Path, **broker_settings: Any) -> Iterator[ProcessCluster]:
    """BROKERS with an SSL Kafka listener, unfenced; no Kafka request failed by the end."""
    with process_cluster(
        tmp_path,
        brokers=len(BROKERS),
        kafka_listeners={"KAFKA": "SSL"},
        broker_settings=broker_settings,
    ) as cluster:
        cluster.format()
        cluster.start_all()
        cluster.wait_for_leader(timeout_s=30)
        wait_unfenced(cluster, BROKERS)
        yield cluster
        for broker_id in BROKERS:
            assert "kafka_request_failed" not in cluster.logs(broker_id)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ProcessCluster]:
    with replicating_cluster(tmp_path) as cluster:
        yield cluster


@pytest.mark.timeout(240)
def test_a_broker_back_from_down_replicates_the_new_incarnation_from_offset_0(
    cluster: ProcessCluster,
) -> None:
    settings = client(cluster, (101, 103))
    admin = AdminClient(settings)
    new_topic = NewTopic(
        "orders", 1, replica_assignment=[[101, 102]], config={"min.insync.replicas": "2"}
    )
    for future in admin.create_topics([new_topic]).values():
        future.result(timeout=30)
    wait_isr(cluster, "orders", {101, 102})
    produce(settings, "orders", [b"old-1", b"old-2", b"old-3"])
    old_id = topic_id_on_disk(cluster, 102, "orders-0")
    wait_until(
        lambda: log_bytes(cluster, 102, "orders-0") == log_bytes(cluster, 101, "orders-0"),
        30,
        "102's copy of the old orders",
    )
    cluster.kill(102, signal.SIGTERM)  # a controlled shutdown: fenced at once
    wait_isr(cluster, "orders", {101})
    # One in-sync replica, min.insync.replicas 2: acks=all is refused, nothing appended.
    assert cluster.certs is not None
    wire = RawConnection(
        cluster.nodes[101].kafka_address("KAFKA"),
        (str(cluster.certs.ca), str(cluster.certs.client_keystore("admin"))),
    )
    try:
        refused = produce_raw(wire, "orders", encode_batch([Record(b"k", b"x", 1, ())]), acks=-1)
        assert int(refused.error_code) == 19, refused  # NOT_ENOUGH_REPLICAS
    finally:
        wire.close()
    for future in admin.delete_topics(["orders"]).values():
        future.result(timeout=30)
    wait_until(lambda: "orders" not in admin.list_topics(timeout=10).topics, 30, "orders deleted")
    for future in admin.create_topics([new_topic]).values():
        future.result(timeout=30)
    produce(settings, "orders", [b"new-1", b"new-2"], acks="1")
    cluster.start(102)
    wait_unfenced(cluster, (102,))
    wait_isr(cluster, "orders", {101, 102})
    new_id = topic_id_on_disk(cluster, 101, "orders-0")
    assert new_id is not None and new_id != old_id
    wait_until(
        lambda: (
            topic_id_on_disk(cluster, 102, "orders-0") == new_id
            and log_bytes(cluster, 102, "orders-0") == log_bytes(cluster, 101, "orders-0")
        ),
        30,
        "102's copy of the new orders, by its new id",
    )
    # The old incarnation was moved aside, never merged into the new one.
    assert cluster.events(102, "partition_moved_aside"), "the old orders-0 was not moved aside"
    values = [value for _, value in read_all(client(cluster), "orders", 0)]
    assert values == [b"new-1", b"new-2"]


def produce(settings: dict[str, Any], name: str, values: list[bytes], acks: str = "all") -> None:
    producer = Producer({**settings, "acks": acks, "enable.idempotence": acks == "all"})
    failures: list[str] = []

    def delivered(error: Any, message: Any) -> None:
        if error is not None:
            failures.append(str(error))

    for value in values:
        producer.produce(name, value=value, partition=0, on_delivery=delivered)
    assert producer.flush(30) == 0
    assert not failures, failures


# ----- a follower's Fetch that is not right ---------------------------------------------


def follower_fetch(
    connection: RawConnection,
    topic_id: uuid.UUID,
    *,
    replica_id: int,
    leader_epoch: int = -1,
    offset: int = 0,
) -> Any:
    return connection.ask(
        1,
        15,
        {
            "replica_state": {"replica_id": replica_id, "replica_epoch": -1},
            "max_wait": 0,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "session_epoch": -1,
            "topics": [
                {
                    "topic_id": topic_id,
                    "partitions": [
                        {
                            "partition": 0,
                            "current_leader_epoch": leader_epoch,
                            "fetch_offset": offset,
                            "partition_max_bytes": 1 << 20,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
        },
    )


@pytest.mark.timeout(180)
def test_follower_fetches_that_are_not_right_get_kafkas_errors(cluster: ProcessCluster) -> None:
    settings = client(cluster)
    admin = AdminClient(settings)
    topic = NewTopic("checked", 1, replica_assignment=[[101, 102]])
    for future in admin.create_topics([topic]).values():
        future.result(timeout=30)
    wait_isr(cluster, "checked", {101, 102})
    produce(settings, "checked", [b"one", b"two"])
    with cluster.admin() as ours:
        description = ours.describe_topics(TopicCollection.of_topic_names(["checked"]))
        described = description.all_topic_names()["checked"]
    topic_id = uuid.UUID(bytes=described.topic_id.bytes)
    epoch = described.partitions[0].leader_epoch
    assert cluster.certs is not None
    ca = str(cluster.certs.ca)
    address = cluster.nodes[101].kafka_address("KAFKA")

    def connect(keystore: Path) -> RawConnection:
        return RawConnection(address, (ca, str(keystore)))

    # Not a broker (the admin's certificate), or a broker claiming another's id: refused whole.
    with contextlib.closing(connect(cluster.certs.client_keystore("admin"))) as admin_wire:
        answer = follower_fetch(admin_wire, topic_id, replica_id=102)
        assert answer.error_code == 31  # CLUSTER_AUTHORIZATION_FAILED
    with contextlib.closing(connect(cluster.certs.node_keystore(103))) as other:
        assert follower_fetch(other, topic_id, replica_id=102).error_code == 31
        # Broker 103 as itself, but not a replica of checked-0.
        part = follower_fetch(other, topic_id, replica_id=103).responses[0].partitions[0]
        assert part.error_code == 6  # NOT_LEADER_OR_FOLLOWER
    with contextlib.closing(connect(cluster.certs.node_keystore(102))) as follower:
        newer = follower_fetch(follower, topic_id, replica_id=102, leader_epoch=epoch + 1)
        assert newer.responses[0].partitions[0].error_code == 75  # UNKNOWN_LEADER_EPOCH
        unknown = follower_fetch(follower, uuid.uuid4(), replica_id=102)
        assert unknown.responses[0].partitions[0].error_code == 100  # UNKNOWN_TOPIC_ID
        beyond = follower_fetch(follower, topic_id, replica_id=102, offset=1_000)
        assert beyond.responses[0].partitions[0].error_code == 1  # OFFSET_OUT_OF_RANGE
        right = follower_fetch(follower, topic_id, replica_id=102, leader_epoch=epoch)
        assert right.responses[0].partitions[0].error_code == 0
    # Nothing of it changed the partition: both records still read back, once.
    values = [value for _, value in read_all(settings, "checked", 0)]
    assert values == [b"one", b"two"]
