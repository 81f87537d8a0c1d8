"""The data plane's metrics on a real broker (docs/operating.md#metrics): 3 controllers and one
broker with an SSL Kafka listener and a metrics listener. confluent-kafka produces known batches
to two topics and reads one back; the broker's /metrics then holds, with Kafka's JMX-exporter
names, the bytes and records in per topic and for all topics (the bytes the segments hold: a
batch is stored as sent), the bytes out (what was read), each partition log's size (the files on
disk) and request times for Produce, Fetch and ListOffsets; ``promtool check metrics`` accepts
the output. Seeded (``KAFKA_METRICS_SEED``).
"""

from __future__ import annotations

import math
import os
import random
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from quorum.harness import ProcessCluster, process_cluster, wait_until

BROKER = 101
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
BYTES_IN = "kafka_server_brokertopicmetrics_bytesin_total"
MESSAGES_IN = "kafka_server_brokertopicmetrics_messagesin_total"
BYTES_OUT = "kafka_server_brokertopicmetrics_bytesout_total"
LOG_SIZE = "kafka_log_log_size"
TOTAL_TIME = "kafka_network_requestmetrics_totaltimems"
# Kafka's own broker names promtool's lint refuses (tests/process/test_metrics_process.py).
KAFKA_NAMES_PROMTOOL_REFUSES = frozenset(
    {
        "kafka_server_brokermetadatametrics_last_applied_record_lag_ms",
        "kafka_server_brokermetadatametrics_metadata_load_error_count",
        "kafka_server_brokermetadatametrics_metadata_apply_error_count",
    }
)


def seed() -> int:
    value = int(os.environ.get("KAFKA_METRICS_SEED", str(random.SystemRandom().randrange(2**32))))
    print(f"KAFKA_METRICS_SEED={value}")
    return value


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    with process_cluster(
        tmp_path_factory.mktemp("kafka-metrics"),
        brokers=1,
        kafka_listeners={"KAFKA": "SSL"},
        broker_settings={"metrics.listener": "http://127.0.0.1:0"},
    ) as cluster:
        cluster.format()
        cluster.start_all()
        cluster.wait_for_leader(timeout_s=30)
        wait_until(lambda: cluster.events(BROKER, "kafka_listener_started"), 60, "Kafka listener")
        yield cluster
        assert "kafka_request_failed" not in cluster.logs(BROKER)


def client_config(cluster: ProcessCluster) -> dict[str, Any]:
    assert cluster.certs is not None
    keystore = str(cluster.certs.client_keystore("admin"))
    return {
        "bootstrap.servers": cluster.nodes[BROKER].kafka_address("KAFKA"),
        "security.protocol": "SSL",
        "ssl.ca.location": str(cluster.certs.ca),
        "ssl.certificate.location": keystore,
        "ssl.key.location": keystore,
    }


def metrics_text(cluster: ProcessCluster) -> str:
    address = wait_until(
        lambda: [e["address"] for e in cluster.events(BROKER, "metrics_listening")],
        30,
        "the broker's metrics listener",
    )[0]
    with urllib.request.urlopen(str(address), timeout=5) as response:
        return str(response.read().decode())


def parse(text: str) -> Samples:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def segment_bytes(cluster: ProcessCluster, topic: str, partition: int) -> int:
    directory = cluster.nodes[BROKER].log_dir / f"{topic}-{partition}"
    return sum(path.stat().st_size for path in directory.glob("*.log"))


def test_bytes_records_log_sizes_and_request_times(cluster: ProcessCluster) -> None:
    rng = random.Random(seed())
    admin = AdminClient(client_config(cluster))
    for future in admin.create_topics(
        [NewTopic("metrics-a", 1, 1), NewTopic("metrics-b", 2, 1)]
    ).values():
        future.result(timeout=30)
    producer = Producer({**client_config(cluster), "acks": "1", "linger.ms": 50})
    delivered: list[Any] = []
    sent = {"metrics-a": 0, "metrics-b": 0}
    for _ in range(4):  # four flushes: at least four batches per partition written
        for topic, partitions in (("metrics-a", 1), ("metrics-b", 2)):
            for partition in range(partitions):
                for _ in range(rng.randrange(1, 20)):
                    value = rng.randbytes(rng.randrange(10, 2_000))
                    producer.produce(
                        topic,
                        value=value,
                        partition=partition,
                        on_delivery=lambda error, _m: delivered.append(error),
                    )
                    sent[topic] += 1
        assert producer.flush(30) == 0
    assert delivered == [None] * sum(sent.values())

    consumer = Consumer(
        {**client_config(cluster), "group.id": "unused", "enable.auto.commit": False}
    )
    assert consumer.get_watermark_offsets(TopicPartition("metrics-a", 0), timeout=10) == (
        0,
        sent["metrics-a"],
    )  # a ListOffsets
    consumer.assign([TopicPartition("metrics-a", 0, OFFSET_BEGINNING)])
    read = 0
    deadline_polls = 200
    while read < sent["metrics-a"] and deadline_polls:
        message = consumer.poll(0.5)
        deadline_polls -= 1
        if message is not None and message.error() is None:
            read += 1
    consumer.close()
    assert read == sent["metrics-a"]

    a_bytes = segment_bytes(cluster, "metrics-a", 0)
    b_bytes = [segment_bytes(cluster, "metrics-b", p) for p in (0, 1)]

    def counted() -> Samples:
        # The consumer's last fetches may still be answered: wait for the bytes it read.
        samples = parse(metrics_text(cluster))
        return samples if samples.get((BYTES_OUT, (("topic", "metrics-a"),))) == a_bytes else {}

    samples = wait_until(counted, 30, "the bytes the consumer read counted as bytes out")
    topic_a, topic_b = (("topic", "metrics-a"),), (("topic", "metrics-b"),)
    # A batch is stored as sent: the bytes in are the segments' bytes.
    assert samples[(BYTES_IN, topic_a)] == a_bytes
    assert samples[(BYTES_IN, topic_b)] == sum(b_bytes)
    assert samples[(BYTES_IN, ())] == a_bytes + sum(b_bytes)
    assert samples[(MESSAGES_IN, topic_a)] == sent["metrics-a"]
    assert samples[(MESSAGES_IN, topic_b)] == sent["metrics-b"]
    assert samples[(MESSAGES_IN, ())] == sum(sent.values())
    assert samples.get((BYTES_OUT, topic_b), 0) == 0  # never read
    assert samples[(BYTES_OUT, ())] == a_bytes
    assert samples[(LOG_SIZE, (("partition", "0"), ("topic", "metrics-a")))] == a_bytes
    for partition, size in enumerate(b_bytes):
        labels = (("partition", str(partition)), ("topic", "metrics-b"))
        assert samples[(LOG_SIZE, labels)] == size > 0
    for api, at_least in (("Produce", 4), ("Fetch", 1), ("FetchConsumer", 1), ("ListOffsets", 1)):
        count = samples[(f"{TOTAL_TIME}_count", (("request", api),))]
        assert count >= at_least, api
        assert samples[(f"{TOTAL_TIME}_sum", (("request", api),))] > 0, api
        median = samples[(TOTAL_TIME, (("quantile", "0.5"), ("request", api)))]
        assert math.isfinite(median) and median >= 0, api
    assert (
        samples[(f"{TOTAL_TIME}_count", (("request", "Fetch"),))]
        == samples[(f"{TOTAL_TIME}_count", (("request", "FetchConsumer"),))]
    )


def test_promtool_accepts_the_data_plane_families(cluster: ProcessCluster) -> None:
    if shutil.which("promtool") is None:
        pytest.skip(
            "promtool is not installed (Debian package prometheus; scripts/test installs it)"
        )
    text = metrics_text(cluster)
    assert BYTES_IN in text and TOTAL_TIME in text  # the data plane's families are there
    result = subprocess.run(
        ["promtool", "check", "metrics"],
        input=text,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    output = (result.stdout + result.stderr).strip()
    assert result.returncode in (0, 3), f"promtool exited {result.returncode}: {output}"
    problems = [
        line
        for line in output.splitlines()
        if line.strip() and line.split(" ", 1)[0] not in KAFKA_NAMES_PROMTOOL_REFUSES
    ]
    assert not problems, problems
