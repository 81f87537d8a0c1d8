"""Client quotas end to end (docs/kafka-listener.md#client-quotas): AlterClientQuotas through a
broker's Kafka listener (forwarded to the controller), the change visible through
DescribeClientQuotas on both brokers, and the brokers applying it live: a confluent-kafka
producer held near its ``producer_byte_rate`` (and answered with throttle_time_ms), then free
once the quota is deleted; a consumer the same with ``consumer_byte_rate``.

One cluster (1 controller, 2 brokers, mTLS; the client is ``CN=admin``, so its quota entity is
``user=CN=admin``). Rates are measured over a few seconds with generous bands: the machine is
shared, and the point is the order of magnitude (held near 100 KB/s against several MB/s free).
The brokers measure over two windows of 1 s instead of Kafka's eleven, so a fresh client's burst
before it is held (a rate is measured over at least all windows but one) is one second's worth.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kio.schema.alter_client_quotas.v1.request import (
    AlterClientQuotasRequest,
    EntityData,
    EntryData,
    OpData,
)
from kio.schema.describe_client_quotas.v1.request import (
    ComponentData,
    DescribeClientQuotasRequest,
)
from kio.schema.metadata.v12.request import MetadataRequest
from kio.static.primitive import f64, i8

from quorum.admin import NewTopic
from quorum.harness import ProcessCluster, process_cluster, wait_until
from quorum.kafka_peer import kafka_missing, run_tool
from quorum.kafka_wire import KafkaWire, tls_context

BROKERS = (101, 102)
CONFIGS = "org.apache.kafka.tools.ConfigCommand"
USER = "CN=admin"
TOPIC = "quota-bytes"
RATE = 100 * 1024  # bytes a second
VALUE = b"x" * 4096


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    with process_cluster(
        tmp_path_factory.mktemp("client-quotas"),
        voters=1,
        brokers=len(BROKERS),
        kafka_listeners={"KAFKA": "SSL"},
        # Two windows of 1 s (Kafka's default is 11): a rate measured over at least one window,
        # so the burst a fresh client may send before it is held is one second's worth.
        broker_settings={"quota.window.num": 2},
    ) as cluster:
        cluster.format()
        cluster.start_all()
        cluster.wait_for_leader(timeout_s=30)
        with cluster.admin() as admin:
            wait_until(
                lambda: sum(not b.is_fenced for b in admin.describe_cluster().brokers) == 2,
                30,
                "both brokers unfenced",
            )
            admin.create_topics([NewTopic(TOPIC, 1, 1)]).topic_id(TOPIC)
        yield cluster
        for broker_id in BROKERS:
            assert "kafka_request_failed" not in cluster.logs(broker_id)


def address(cluster: ProcessCluster, broker: int = 101) -> str:
    return cluster.nodes[broker].kafka_address("KAFKA")


def wire(cluster: ProcessCluster, broker: int = 101) -> KafkaWire:
    assert cluster.certs is not None
    context = tls_context(cluster.certs.ca, cluster.certs.client_keystore("admin"))
    return KafkaWire(address(cluster, broker), context)


def alter(cluster: ProcessCluster, key: str, value: float | None) -> Any:
    """AlterClientQuotas v1 for ``user=CN=admin`` through broker 101's Kafka listener."""
    op = OpData(key=key, value=f64(float(value or 0.0)), remove=value is None)
    entry = EntryData(entity=(EntityData(entity_type="user", entity_name=USER),), ops=(op,))
    with wire(cluster) as connection:
        return connection.ask(AlterClientQuotasRequest(entries=(entry,), validate_only=False))


def described(cluster: ProcessCluster, broker: int) -> dict[str, float]:
    """``user=CN=admin``'s quotas as DescribeClientQuotas v1 answers them on ``broker``."""
    request = DescribeClientQuotasRequest(
        components=(ComponentData(entity_type="user", match_type=i8(0), match=USER),),
        strict=True,
    )
    with wire(cluster, broker) as connection:
        answer = connection.ask(request)
    assert answer.error_code.value == 0, answer
    values: dict[str, float] = {}
    for entry in answer.entries or ():
        assert [(e.entity_type, e.entity_name) for e in entry.entity] == [("user", USER)]
        values.update({v.key: float(v.value) for v in entry.values})
    return values


def on_both_brokers(cluster: ProcessCluster, expected: dict[str, float]) -> None:
    for broker in BROKERS:
        wait_until(
            lambda b=broker: described(cluster, b) == expected,
            10,
            f"broker {broker} describes {expected}",
        )


def client_config(cluster: ProcessCluster) -> dict[str, Any]:
    assert cluster.certs is not None
    keystore = str(cluster.certs.client_keystore("admin"))
    return {
        "bootstrap.servers": address(cluster),
        "security.protocol": "SSL",
        "ssl.ca.location": str(cluster.certs.ca),
        "ssl.certificate.location": keystore,
        "ssl.key.location": keystore,
        "statistics.interval.ms": 500,
    }


def throttled_ms(stats: list[str]) -> int:
    """The largest throttle time librdkafka saw from any broker (its ``throttle`` window)."""
    seen = 0
    for text in stats:
        for broker in json.loads(text)["brokers"].values():
            seen = max(seen, int(broker.get("throttle", {}).get("max", 0)))
    return seen


def produce_rate(cluster: ProcessCluster, seconds: float) -> tuple[float, int]:
    """Bytes a second of values a producer got acknowledged over ``seconds``, and the largest
    throttle time it was told."""
    stats: list[str] = []
    producer = Producer(
        {
            **client_config(cluster),
            "client.id": "quota-producer",
            "linger.ms": 5,
            "batch.size": 64 * 1024,
            "queue.buffering.max.kbytes": 512,
            "stats_cb": stats.append,
        }
    )
    acked = 0

    def delivered(error: Any, message: Any) -> None:
        nonlocal acked
        if error is None:
            acked += len(message.value())

    producer.produce(TOPIC, VALUE, on_delivery=delivered)
    producer.flush(10)  # connected, metadata known
    acked = 0
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        try:
            producer.produce(TOPIC, VALUE, on_delivery=delivered)
        except BufferError:
            producer.poll(0.05)
            continue
        producer.poll(0)
    elapsed = time.monotonic() - started
    rate = acked / elapsed
    producer.flush(15)
    producer.poll(0.6)  # one more statistics report
    return rate, throttled_ms(stats)


def consume_rate(cluster: ProcessCluster, seconds: float) -> tuple[float, int]:
    """Bytes a second a consumer read from offset 0 over ``seconds`` (at most what the topic
    holds), and the largest throttle time it was told."""
    stats: list[str] = []
    consumer = Consumer(
        {
            **client_config(cluster),
            "client.id": "quota-consumer",
            "group.id": f"quota-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "message.max.bytes": 128 * 1024,
            "fetch.max.bytes": 256 * 1024,
            "max.partition.fetch.bytes": 256 * 1024,
            "stats_cb": stats.append,
        }
    )
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        read = 0
        first: float | None = None
        deadline = time.monotonic() + seconds + 10
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None or message.error() is not None:
                continue
            if first is None:
                first = time.monotonic()
                continue
            read += len(message.value())
            if time.monotonic() - first >= seconds:
                break
        assert first is not None, "the consumer read nothing"
        rate = read / (time.monotonic() - first)
        consumer.poll(0.6)
        return rate, throttled_ms(stats)
    finally:
        consumer.close()


# Not `timing`: its bounds are wide (passed at load average 22), and a busy machine only
# slows a producer further below a quota
def test_producer_byte_rate_holds_a_producer_and_deleting_it_frees_it(
    cluster: ProcessCluster,
) -> None:
    answer = alter(cluster, "producer_byte_rate", RATE)
    assert [(e.error_code.value, e.error_message) for e in answer.entries] == [(0, None)]
    on_both_brokers(cluster, {"producer_byte_rate": float(RATE)})
    held, throttle_ms = produce_rate(cluster, 4.0)
    print(f"held: {held:.0f} B/s, throttle {throttle_ms} ms")
    assert RATE * 0.3 < held < RATE * 2, held
    assert throttle_ms > 0
    alter(cluster, "producer_byte_rate", None)
    on_both_brokers(cluster, {})
    free, _ = produce_rate(cluster, 2.0)
    print(f"free: {free:.0f} B/s")
    assert free > RATE * 5, free


def test_consumer_byte_rate_holds_a_consumer_and_deleting_it_frees_it(
    cluster: ProcessCluster,
) -> None:
    # Enough data to read for a while at either rate (a few MB).
    producer = Producer(client_config(cluster))
    for _ in range(1500):
        producer.produce(TOPIC, VALUE)
        producer.poll(0)
    assert producer.flush(30) == 0
    answer = alter(cluster, "consumer_byte_rate", RATE)
    assert answer.entries[0].error_code.value == 0
    on_both_brokers(cluster, {"consumer_byte_rate": float(RATE)})
    held, throttle_ms = consume_rate(cluster, 4.0)
    print(f"held: {held:.0f} B/s, throttle {throttle_ms} ms")
    assert RATE * 0.3 < held < RATE * 2, held
    assert throttle_ms > 0
    alter(cluster, "consumer_byte_rate", None)
    on_both_brokers(cluster, {})
    free, _ = consume_rate(cluster, 1.0)
    print(f"free: {free:.0f} B/s")
    assert free > RATE * 5, free


def test_bad_alterations_are_refused_with_kafkas_codes(cluster: ProcessCluster) -> None:
    answer = alter(cluster, "producer_byte_rate", 1.5)
    ((code, message),) = [(e.error_code.value, e.error_message) for e in answer.entries]
    assert code == 42 and "must be a Long value" in message  # INVALID_REQUEST
    answer = alter(cluster, "controller_mutation_rate", 10)
    assert answer.entries[0].error_code.value == 42
    assert "producer_byte_rate" in answer.entries[0].error_message
    on_both_brokers(cluster, {})


def quota_items(line: str) -> tuple[str, set[str]]:
    """A ConfigCommand quota line as (its entity part, its ``key=value`` items): Kafka prints
    the items in its map's order."""
    entity, _, items = line.partition(" are ")
    return entity, {item.strip() for item in items.split(",") if item.strip()}


def test_kafka_configs_and_metaquorum_configs_agree(cluster: ProcessCluster) -> None:
    """Kafka's own kafka-configs (AlterClientQuotas, DescribeClientQuotas through a broker's
    Kafka listener) and ``metaquorum configs`` (the controllers' AdminService) see the same
    quotas and print the same lines."""
    missing = kafka_missing()
    if missing is not None:
        pytest.skip(f"Kafka's tools cannot run: {missing}")
    assert cluster.certs is not None
    kafka = [
        "--bootstrap-server",
        address(cluster, 102),
        "--command-config",
        str(cluster.certs.kafka_client_properties()),
    ]
    entity = ["--entity-type", "users", "--entity-name", "CN=alice"]
    done = run_tool(
        CONFIGS, *kafka, *entity, "--alter",
        "--add-config", "producer_byte_rate=2048,request_percentage=12.5",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "Completed updating config for user CN=alice."
    expected = ("Quota configs for user-principal 'CN=alice'", {
        "producer_byte_rate=2048.0", "request_percentage=12.5"
    })  # fmt: skip
    ours = cluster.run_cli(
        "configs", "--bootstrap-server", cluster.bootstrap, *entity, "--describe"
    ).stdout
    assert [quota_items(line) for line in ours.splitlines()] == [expected], ours
    described = run_tool(CONFIGS, *kafka, *entity, "--describe")
    lines = [line for line in described.stdout.splitlines() if line.startswith("Quota configs")]
    assert [quota_items(line) for line in lines] == [expected], described.stdout
    # metaquorum changes it; Kafka's tool sees the change.
    out = cluster.run_cli(
        "configs", "--bootstrap-server", cluster.bootstrap, *entity, "--alter",
        "--delete-config", "request_percentage",
    ).stdout  # fmt: skip
    assert out.strip() == "Completed updating config for user CN=alice."
    described = run_tool(CONFIGS, *kafka, *entity, "--describe")
    lines = [line for line in described.stdout.splitlines() if line.startswith("Quota configs")]
    assert [quota_items(line) for line in lines] == [
        ("Quota configs for user-principal 'CN=alice'", {"producer_byte_rate=2048.0"})
    ], described.stdout
    # The default user, both ways.
    done = run_tool(
        CONFIGS, *kafka, "--entity-type", "users", "--entity-default", "--alter",
        "--add-config", "consumer_byte_rate=1000000",
    )  # fmt: skip
    assert done.stdout.strip() == "Completed updating default config for users in the cluster."
    ours = cluster.run_cli(
        "configs", "--bootstrap-server", cluster.bootstrap, "--entity-type", "users",
        "--entity-default", "--describe",
    ).stdout  # fmt: skip
    assert ours == "Quota configs for user-principal '<default>' are consumer_byte_rate=1000000.0\n"
    cluster.run_cli(
        "configs", "--bootstrap-server", cluster.bootstrap, "--entity-type", "users",
        "--entity-default", "--alter", "--delete-config", "consumer_byte_rate",
    )  # fmt: skip
    cluster.run_cli(
        "configs", "--bootstrap-server", cluster.bootstrap, *entity, "--alter",
        "--delete-config", "producer_byte_rate",
    )  # fmt: skip
    # A client id: metaquorum sets it, Kafka's tool prints the same line, then deletes it.
    client = ["--entity-type", "clients", "--entity-name", "quota-app"]
    out = cluster.run_cli(
        "configs", "--bootstrap-server", cluster.bootstrap, *client, "--alter",
        "--add-config", "request_percentage=30",
    ).stdout  # fmt: skip
    assert out == "Completed updating config for client quota-app.\n"
    line = "Quota configs for client-id 'quota-app' are request_percentage=30.0"
    described = run_tool(CONFIGS, *kafka, *client, "--describe")
    assert line in described.stdout.splitlines(), described.stdout
    done = run_tool(CONFIGS, *kafka, *client, "--alter", "--delete-config", "request_percentage")
    assert done.stdout.strip() == "Completed updating config for client quota-app."
    ours = cluster.run_cli(
        "configs", "--bootstrap-server", cluster.bootstrap, *client, "--describe"
    )
    assert ours.stdout == ""
    on_both_brokers(cluster, {})


def metadata_throttle_ms(cluster: ProcessCluster, requests: int) -> int:
    """The largest throttle_time_ms of ``requests`` Metadata v12 answers, each on a fresh
    connection (a throttled connection is muted; a new one is not)."""
    largest = 0
    for _ in range(requests):
        with wire(cluster) as connection:
            answer = connection.ask(
                MetadataRequest(topics=None, include_topic_authorized_operations=False)
            )
        largest = max(largest, int(answer.throttle_time.total_seconds() * 1000))
    return largest


def test_request_percentage_replaces_the_default_request_quota(cluster: ProcessCluster) -> None:
    """A tiny request_percentage for the user throttles its Metadata requests at once; without
    it the default (50 %) leaves a handful of them alone."""
    answer = alter(cluster, "request_percentage", 0.001)
    assert answer.entries[0].error_code.value == 0
    on_both_brokers(cluster, {"request_percentage": 0.001})
    assert metadata_throttle_ms(cluster, 5) > 0
    alter(cluster, "request_percentage", None)
    on_both_brokers(cluster, {})
    assert metadata_throttle_ms(cluster, 5) == 0


def test_without_the_cluster_acls_a_client_is_refused(cluster: ProcessCluster) -> None:
    """CN=alice (a valid certificate, no ACLs): CLUSTER_AUTHORIZATION_FAILED for both APIs."""
    assert cluster.certs is not None
    context = tls_context(cluster.certs.ca, cluster.certs.client_keystore("alice"))
    op = OpData(key="producer_byte_rate", value=f64(1024.0), remove=False)
    entry = EntryData(entity=(EntityData(entity_type="user", entity_name="CN=alice"),), ops=(op,))
    with KafkaWire(address(cluster), context) as connection:
        altered = connection.ask(AlterClientQuotasRequest(entries=(entry,), validate_only=False))
        described = connection.ask(DescribeClientQuotasRequest(components=(), strict=False))
    assert altered.entries[0].error_code.value == 31, altered
    assert "ALTER_CONFIGS" in altered.entries[0].error_message
    assert described.error_code.value == 31, described
    assert described.entries is None


def test_replication_is_not_held_by_a_default_user_quota(cluster: ProcessCluster) -> None:
    """A 1 KB/s consumer_byte_rate for the default user applies to clients, not to the
    followers' Fetch (brokers are nodes, as Kafka exempts replication): ten acks=all writes to
    a topic replicated on both brokers are acknowledged at once, one after the other (20 s
    when the followers were held)."""
    with cluster.admin() as admin:
        admin.create_topics([NewTopic("quota-replicated", 1, 2)]).topic_id("quota-replicated")
    default = EntryData(
        entity=(EntityData(entity_type="user", entity_name=None),),
        ops=(OpData(key="consumer_byte_rate", value=f64(1024.0), remove=False),),
    )
    with wire(cluster) as connection:
        answer = connection.ask(AlterClientQuotasRequest(entries=(default,), validate_only=False))
    assert answer.entries[0].error_code.value == 0
    try:
        producer = Producer({**client_config(cluster), "acks": "all", "linger.ms": 0})
        producer.produce("quota-replicated", VALUE)
        assert producer.flush(30) == 0  # connected; the follower has fetched once
        # Ten writes one after the other, each acknowledged only once the follower fetched it:
        # were the follower held to 1 KB/s, each would wait out a throttle of up to a quota
        # window (2 s here).
        started = time.monotonic()
        for _ in range(10):
            producer.produce("quota-replicated", VALUE)
            assert producer.flush(30) == 0
        elapsed = time.monotonic() - started
        assert elapsed < 6, f"10 acks=all writes took {elapsed:.1f} s"
    finally:
        removal = EntryData(
            entity=default.entity,
            ops=(OpData(key="consumer_byte_rate", value=f64(0.0), remove=True),),
        )
        with wire(cluster) as connection:
            connection.ask(AlterClientQuotasRequest(entries=(removal,), validate_only=False))
