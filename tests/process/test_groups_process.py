"""Consumer groups on real processes (docs/groups.md): 3 controllers and 2 brokers over mTLS
with ACLs on, ``__consumer_offsets`` created on first use with 3 partitions and replication
factor 2.

- Three consumers (confluent-kafka, and again kafka-python), each its own process, share a
  topic of 6 partitions: every partition is assigned to exactly one of them; one is killed
  with SIGKILL (no LeaveGroup), its session expires, the other two take its partitions over
  and read on from its committed offsets: every record is committed exactly once across the
  three (none lost, none read twice).
- The coordinator broker is killed with SIGKILL: the other replica of the group's
  ``__consumer_offsets`` partition becomes its leader, loads it, and answers the committed
  offsets the group had; a live member carries on through such a kill.
- kafka-python (consumer and KafkaAdminClient), aiokafka and kafkajs group consumers, and
  kcat's balanced consumer (``-G``).

Randomness is seeded (``KAFKA_DATA_SEED``); waits are on conditions with deadlines.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from broker.groups.partitioning import partition_for
from quorum.harness import ProcessCluster, process_cluster, wait_until
from tests.process.test_kafka_data_process import (
    BROKERS,
    create_topic,
    seed,
    ssl_config,
    wait_serving,
)

ROOT = Path(__file__).resolve().parents[2]
CONSUMER = ROOT / "tests" / "fixtures" / "groups" / "consumer.py"
OFFSETS_PARTITIONS = 3
GROUP_SETTINGS = {
    "offsets.topic.num.partitions": OFFSETS_PARTITIONS,
    "offsets.topic.replication.factor": 2,
    "group.initial.rebalance.delay.ms": 200,
    "group.min.session.timeout.ms": 1_000,
}
SESSION_MS = 4_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    root = tmp_path_factory.mktemp("groups")
    with process_cluster(
        root,
        brokers=len(BROKERS),
        kafka_listeners={"KAFKA": "SSL"},
        broker_settings=GROUP_SETTINGS,
    ) as cluster:
        cluster.format()
        cluster.start_all()
        cluster.wait_for_leader(timeout_s=30)
        wait_serving(cluster)
        yield cluster
        for broker_id in BROKERS:
            assert "kafka_request_failed" not in cluster.logs(broker_id)
            assert "group_task_failed" not in cluster.logs(broker_id)


def consumer_config(cluster: ProcessCluster, group: str, broker: int = 101) -> dict[str, Any]:
    return {
        **ssl_config(cluster, broker),
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": SESSION_MS,
        "heartbeat.interval.ms": 500,
        "partition.assignment.strategy": "range",
    }


class MemberProcess:
    def __init__(
        self,
        cluster: ProcessCluster,
        group: str,
        topic: str,
        log: Path,
        client: str = "confluent-kafka",
    ) -> None:
        self.log = log
        self.handle = log.open("wb")
        self.process = subprocess.Popen(
            [
                sys.executable,
                str(CONSUMER),
                "--config",
                json.dumps(consumer_config(cluster, group)),
                "--topic",
                topic,
                "--seconds",
                "150",
                "--client",
                client,
            ],
            stdout=self.handle,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )

    def lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines()

    def committed(self) -> list[tuple[int, int]]:
        found = []
        for line in self.lines():
            if line.startswith("committed "):
                _, partition, offset = line.split()
                found.append((int(partition), int(offset)))
        return found

    def assignment(self) -> set[int] | None:
        assigned = [line for line in self.lines() if line.startswith("assign")]
        if not assigned:
            return None
        text = assigned[-1].removeprefix("assign").strip()
        return {int(p) for p in text.split(",") if p}

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)
        self.handle.close()


def produce(cluster: ProcessCluster, topic: str, start: int, count: int, partitions: int) -> None:
    producer = Producer({**ssl_config(cluster), "acks": "all"})
    for i in range(start, start + count):
        producer.produce(
            topic, key=f"k-{i}".encode(), value=f"v-{i}".encode(), partition=i % partitions
        )
    assert producer.flush(30) == 0


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python"])
def test_three_consumers_share_a_topic_and_a_killed_member_is_replaced(
    client: str, cluster: ProcessCluster, tmp_path: Path
) -> None:
    rng_seed = seed()
    topic, group, partitions = f"grouped-{client}", f"g-{client}-{rng_seed}", 6
    create_topic(cluster, topic, partitions=partitions, on=None, replication=2)
    produce(cluster, topic, 0, 300, partitions)
    members = [
        MemberProcess(cluster, group, topic, tmp_path / f"member-{i}.out", client) for i in range(3)
    ]
    try:

        def spread() -> bool:
            assigned = [m.assignment() or set() for m in members]
            union: set[int] = set().union(*assigned)
            return (
                all(assigned)
                and union == set(range(partitions))
                and (sum(len(a) for a in assigned) == partitions)
            )

        wait_until(spread, 90, "the 3 members to share the 6 partitions, each once")
        wait_until(
            lambda: len({c for m in members for c in m.committed()}) == 300,
            90,
            "the first 300 records committed",
        )
        victim = members[rng_seed % 3]
        lost = victim.assignment()
        victim.process.kill()
        victim.process.wait(timeout=10)
        produce(cluster, topic, 300, 300, partitions)
        survivors = [m for m in members if m is not victim]
        wait_until(
            lambda: len({c for m in members for c in m.committed()}) == 600,
            120,
            f"all 600 records committed after member {members.index(victim)} was killed",
        )
        every = [c for m in members for c in m.committed()]
        assert sorted(every) == sorted(set(every)), "a record was committed twice"
        assert {p for p, _ in every} == set(range(partitions))
        taken = set().union(*(m.assignment() or set() for m in survivors))
        assert taken == set(range(partitions)), (taken, lost)
        # Offsets as the group committed them, read by a new member of no group's generation.
        reader = Consumer(consumer_config(cluster, group, broker=102))
        try:
            committed = reader.committed(
                [TopicPartition(topic, p) for p in range(partitions)], timeout=60
            )
        finally:
            reader.close()
        assert [c.offset for c in committed] == [100] * partitions
    finally:
        for member in members:
            member.stop()


def test_committed_offsets_survive_a_kill_of_the_coordinator(
    cluster: ProcessCluster, tmp_path: Path
) -> None:
    rng_seed = seed()
    topic, group, partitions = "survives", f"s-{rng_seed}", 2
    create_topic(cluster, topic, partitions=partitions, on=None, replication=2)
    produce(cluster, topic, 0, 20, partitions)
    consumer = Consumer(consumer_config(cluster, group))
    consumer.subscribe([topic])
    counting = _Counting(consumer)
    try:
        seen = wait_until(
            lambda: counting.until(20),
            90,
            "the group's consumer to read and commit 20 records",
        )
    finally:
        consumer.close()
    assert seen >= 20
    admin = AdminClient(ssl_config(cluster))
    offsets_topic = admin.list_topics(timeout=30).topics["__consumer_offsets"]
    assert len(offsets_topic.partitions) == OFFSETS_PARTITIONS
    index = partition_for(group, OFFSETS_PARTITIONS)
    state = offsets_topic.partitions[index]
    assert sorted(state.replicas) == sorted(BROKERS)
    coordinator = state.leader
    other = next(b for b in BROKERS if b != coordinator)
    cluster.kill(coordinator)  # SIGKILL
    try:
        reader = Consumer(consumer_config(cluster, group, broker=other))
        try:
            committed = wait_until(
                lambda: _committed(reader, topic, partitions),
                90,
                f"broker {other} to coordinate {group} after broker {coordinator} was killed",
            )
        finally:
            reader.close()
        assert [c.offset for c in committed] == [10, 10]
        moved = AdminClient(ssl_config(cluster, other)).list_topics(timeout=30)
        assert moved.topics["__consumer_offsets"].partitions[index].leader == other
    finally:
        cluster.start(coordinator)
        wait_serving(cluster)


class _Counting:
    """Polls a consumer and commits each record it reads, counting them."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.count = 0

    def until(self, total: int) -> int | None:
        message = self.consumer.poll(0.5)
        if message is not None and message.error() is None:
            self.consumer.commit(message=message, asynchronous=False)
            self.count += 1
        return self.count if self.count >= total else None


def _committed(reader: Consumer, topic: str, partitions: int) -> list[Any] | None:
    try:
        found = reader.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=5)
    except Exception:  # the coordinator is moving: ask again
        return None
    return found if all(c.offset >= 0 for c in found) else None


# ----- other clients: kafka-python, aiokafka, kafkajs ---------------------------------------------


def committed_offsets(
    cluster: ProcessCluster, group: str, topic: str, partitions: int
) -> list[int]:
    reader = Consumer(consumer_config(cluster, group, broker=102))
    try:
        found = reader.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=60)
    finally:
        reader.close()
    return [c.offset for c in found]


def test_kafka_python_group_consumer_and_admin(cluster: ProcessCluster) -> None:
    """kafka-python 3's KafkaConsumer in a group reads and commits; a second one resumes at the
    committed offsets; its KafkaAdminClient lists, describes and deletes the group."""
    kafka = pytest.importorskip("kafka")
    from kafka.admin import KafkaAdminClient  # noqa: PLC0415

    assert cluster.certs is not None
    keystore = str(cluster.certs.client_keystore("admin"))
    tls = {
        "bootstrap_servers": cluster.nodes[101].kafka_address("KAFKA"),
        "security_protocol": "SSL",
        "ssl_cafile": str(cluster.certs.ca),
        "ssl_certfile": keystore,
        "ssl_keyfile": keystore,
    }
    topic, group = "kafka-python-group", f"kp-{seed()}"
    create_topic(cluster, topic, partitions=2, on=None, replication=2)
    produce(cluster, topic, 0, 20, 2)

    def read(count: int) -> list[tuple[int, int]]:
        consumer = kafka.KafkaConsumer(
            topic,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=500,
            **tls,
        )
        try:
            seen: list[tuple[int, int]] = []

            def more() -> bool:
                for records in consumer.poll(timeout_ms=500).values():
                    seen.extend((r.partition, r.offset) for r in records)
                return len(seen) >= count

            wait_until(more, 90, f"kafka-python to read {count} records in group {group}")
            consumer.commit()
            return seen
        finally:
            consumer.close()

    first = read(20)
    assert sorted(first) == sorted((p, o) for p in range(2) for o in range(10))
    produce(cluster, topic, 20, 4, 2)
    assert sorted(read(4)) == [(0, 10), (0, 11), (1, 10), (1, 11)]  # resumed, nothing twice
    admin = KafkaAdminClient(**tls)
    try:
        listed = admin.list_groups(states_filter=["Empty"])
        assert group in [g["group_id"] for g in listed]
        described = admin.describe_groups([group])[group]
        assert (described["group_state"], described["error"]) == ("Empty", None)
        offsets = admin.list_group_offsets({group: None})[group]
        assert {tp.partition: meta.offset for tp, meta in offsets.items()} == {0: 12, 1: 12}
        dropped = admin.delete_group_offsets(group, [kafka.TopicPartition(topic, 1)])
        assert [e.__name__ for e in dropped.values()] == ["NoError"]
        assert committed_offsets(cluster, group, topic, 2) == [12, -1001]
        assert admin.delete_groups([group]) == {group: "OK"}
    finally:
        admin.close()
    assert committed_offsets(cluster, group, topic, 2) == [-1001, -1001]  # deleted: none


def test_aiokafka_group_consumer(cluster: ProcessCluster) -> None:
    aiokafka = pytest.importorskip("aiokafka")
    from aiokafka.helpers import create_ssl_context  # noqa: PLC0415

    assert cluster.certs is not None
    keystore = str(cluster.certs.client_keystore("admin"))
    topic, group = "aiokafka-group", f"aio-{seed()}"
    create_topic(cluster, topic, partitions=2, on=None, replication=2)
    produce(cluster, topic, 0, 20, 2)

    async def consume() -> list[tuple[int, int]]:
        consumer = aiokafka.AIOKafkaConsumer(
            topic,
            bootstrap_servers=cluster.nodes[102].kafka_address("KAFKA"),
            security_protocol="SSL",
            ssl_context=create_ssl_context(
                cafile=str(cluster.certs.ca), certfile=keystore, keyfile=keystore
            ),
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=500,
        )
        await consumer.start()
        try:
            seen: list[tuple[int, int]] = []
            deadline = asyncio.get_running_loop().time() + 90
            while len(seen) < 20 and asyncio.get_running_loop().time() < deadline:
                for batch in (await consumer.getmany(timeout_ms=1_000)).values():
                    seen += [(m.partition, m.offset) for m in batch]
            await consumer.commit()
            return seen
        finally:
            await consumer.stop()

    seen = asyncio.run(asyncio.wait_for(consume(), 120))
    assert sorted(seen) == sorted((p, o) for p in range(2) for o in range(10))
    assert committed_offsets(cluster, group, topic, 2) == [10, 10]


def test_kafkajs_group_consumer(cluster: ProcessCluster) -> None:
    from tests.process.test_kafka_clients_data_process import kafkajs_modules  # noqa: PLC0415

    modules = kafkajs_modules()
    assert cluster.certs is not None
    topic, group = "kafkajs-group", f"js-{seed()}"
    create_topic(cluster, topic, partitions=2, on=None, replication=2)
    produce(cluster, topic, 0, 20, 2)
    spec = {
        "brokers": [cluster.nodes[101].kafka_address("KAFKA")],
        "ca": str(cluster.certs.ca),
        "keystore": str(cluster.certs.client_keystore("admin")),
        "topic": topic,
        "group": group,
        "count": 20,
    }
    done = subprocess.run(
        ["node", str(ROOT / "tests" / "fixtures" / "kafkajs" / "consume_group.js")],
        input=json.dumps(spec).encode(),
        capture_output=True,
        timeout=150,
        env={**os.environ, "NODE_PATH": str(modules)},
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    read = json.loads(done.stdout)["read"]
    assert sorted((p, o) for p, o, _ in read) == sorted((p, o) for p in range(2) for o in range(10))
    assert {v for _, _, v in read} == {f"v-{i}" for i in range(20)}
    assert committed_offsets(cluster, group, topic, 2) == [10, 10]
    # kafkajs' admin client on the group it left: listGroups, describeGroups, fetchOffsets.
    groups = json.loads(done.stdout)["groups"]
    assert groups["listed"] == [{"groupId": group, "protocolType": "consumer"}]
    assert groups["described"] == [
        {
            "groupId": group,
            "state": "Empty",
            "protocolType": "consumer",
            "members": 0,
            "errorCode": 0,
        }
    ]
    assert groups["offsets"] == [{"topic": topic, "partitions": [[0, 10], [1, 10]]}]


def test_a_live_member_carries_on_through_a_kill_of_its_coordinator(
    cluster: ProcessCluster, tmp_path: Path
) -> None:
    """A member keeps consuming while its coordinator broker is killed with SIGKILL: it finds
    the new coordinator (the other replica of the group's partition, which loads the group
    Stable with its members), keeps its generation's commits, and commits every record once."""
    rng_seed = seed()
    topic, group, partitions = "carries-on", f"c-{rng_seed}", 2
    create_topic(cluster, topic, partitions=partitions, on=None, replication=2)
    produce(cluster, topic, 0, 20, partitions)
    member = MemberProcess(cluster, group, topic, tmp_path / "member.out")
    coordinator: int | None = None
    try:
        wait_until(lambda: len(set(member.committed())) == 20, 90, "the first 20 committed")
        admin = AdminClient(ssl_config(cluster))
        offsets_topic = admin.list_topics(timeout=30).topics["__consumer_offsets"]
        coordinator = offsets_topic.partitions[partition_for(group, OFFSETS_PARTITIONS)].leader
        other = next(b for b in BROKERS if b != coordinator)
        cluster.kill(coordinator)
        producer = Producer({**ssl_config(cluster, other), "acks": "all"})
        for i in range(20, 40):
            producer.produce(topic, value=f"v-{i}".encode(), partition=i % partitions)
        assert producer.flush(90) == 0
        wait_until(
            lambda: len(set(member.committed())) == 40,
            120,
            f"the member to commit 40 records after broker {coordinator} was killed",
        )
        committed = member.committed()
        assert sorted(committed) == sorted(set(committed)), "a record was committed twice"
        assert member.process.poll() is None
    finally:
        member.stop()
        if coordinator is not None and not cluster.nodes[coordinator].alive:
            cluster.start(coordinator)
            wait_serving(cluster)


def test_metaquorum_groups_describes_lag_resets_and_deletes(cluster: ProcessCluster) -> None:
    """``metaquorum groups`` (kafka-consumer-groups' options and lines) against our brokers:
    the group's committed offsets with each partition's log end offset and lag, a reset to the
    earliest offsets that the coordinator then answers, and the group's deletion."""
    assert cluster.certs is not None
    topic, group = "tool-orders", f"tool-{seed()}"
    create_topic(cluster, topic, partitions=2, on=None, replication=2)
    produce(cluster, topic, 0, 20, 2)  # 10 records in each partition
    committer = Consumer(consumer_config(cluster, group))
    try:
        wait_until(
            lambda: _simple_commit(
                committer, [TopicPartition(topic, 0, 4), TopicPartition(topic, 1, 10)]
            ),
            60,
            f"offsets of {group} committed",
        )
    finally:
        committer.close()
    base = [
        "groups",
        "--bootstrap-server",
        cluster.nodes[102].kafka_address("KAFKA"),
        "--command-config",
        str(cluster.certs.kafka_client_properties()),
    ]

    described = cluster.run_cli(*base, "--describe", "--group", group)
    rows = [line.split() for line in described.stdout.splitlines() if line.strip()]
    assert rows, described.stdout + described.stderr
    assert rows[0][:6] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"]
    assert sorted(row[:6] for row in rows[1:]) == [
        [group, topic, "0", "4", "10", "6"],
        [group, topic, "1", "10", "10", "0"],
    ], described.stdout
    assert f"Consumer group '{group}' has no active members." in described.stderr

    listed = cluster.run_cli(*base, "--list")
    assert group in listed.stdout.split(), listed.stdout

    reset = cluster.run_cli(
        *base, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute"
    )
    assert "NEW-OFFSET" in reset.stdout, reset.stdout + reset.stderr
    assert committed_offsets(cluster, group, topic, 2) == [0, 0]

    deleted = cluster.run_cli(*base, "--delete", "--group", group)
    assert f"Deletion of requested consumer groups ('{group}') was successful." in deleted.stdout
    assert committed_offsets(cluster, group, topic, 2) == [-1001, -1001]


def _simple_commit(consumer: Consumer, offsets: list[TopicPartition]) -> bool:
    """A commit outside any generation (Kafka's admin-style commit to an Empty group);
    False while the coordinator is not available yet (retriable)."""
    try:
        consumer.commit(offsets=offsets, asynchronous=False)
    except KafkaException as exc:
        if not exc.args[0].retriable():
            raise
        return False
    return True


def test_kcat_balanced_consumer(cluster: ProcessCluster) -> None:
    """kcat's balanced consumer (``-G group topic``, librdkafka's group consumer with its
    automatic commit, which also commits on close): it reads every record once and the group
    has committed offsets at the end of each partition; a second run reads only what came after."""
    from tests.process.test_kafka_clients_data_process import kcat  # noqa: PLC0415

    topic, group = "kcat-group", f"kcat-{seed()}"
    create_topic(cluster, topic, partitions=2, on=None, replication=2)
    produce(cluster, topic, 0, 20, 2)

    def read(count: int) -> list[tuple[int, int, str]]:
        output = kcat(
            cluster,
            "-G",
            group,
            topic,
            "-c",
            str(count),
            "-f",
            "%p %o %s\n",
            "-X",
            "auto.offset.reset=earliest",
            "-X",
            f"session.timeout.ms={SESSION_MS}",
            "-X",
            "heartbeat.interval.ms=500",
            "-q",
        )
        lines = output.decode().splitlines()
        return [(int(p), int(o), v) for p, o, v in (line.split() for line in lines)]

    first = read(20)
    assert sorted((p, o) for p, o, _ in first) == sorted(
        (p, o) for p in range(2) for o in range(10)
    )
    assert {v for _, _, v in first} == {f"v-{i}" for i in range(20)}
    assert committed_offsets(cluster, group, topic, 2) == [10, 10]
    produce(cluster, topic, 20, 4, 2)
    assert sorted((p, o) for p, o, _ in read(4)) == [(0, 10), (0, 11), (1, 10), (1, 11)]
    assert committed_offsets(cluster, group, topic, 2) == [12, 12]
