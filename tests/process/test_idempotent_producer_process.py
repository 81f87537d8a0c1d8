"""Idempotent producers on real processes (docs/kafka-listener.md#idempotent-producers), 3
controllers and 2 brokers over mTLS:

- confluent-kafka with ``enable.idempotence=True`` produces with retries while its partition's
  leader is killed with SIGKILL and restarted twice; every acknowledged record is read back
  exactly once at its offset. A batch the dead broker had written but not answered is retried
  and answered with its first offset; that window is short, so with deduplication switched off
  this test caught duplicates in 1 of 5 runs;
- over the raw wire, deterministically (with deduplication off it fails every run): each of a
  producer's last 5 batches retried after kill -9 of its leader and of the active controller is
  answered with its first offset, and producer ids stay unique across brokers, the controller
  failover and the broker restart;
- kafka-python's idempotent producer, and Kafka's Java producer with its defaults (idempotent);
  AllocateProducerIds only from a registered broker as itself; a transactional producer
  refused at once, not left retrying;
- Kafka 4.4's own DumpLogSegments reads a producer snapshot file (skipped without the jars,
  scripts/kafka/fetch).
"""

from __future__ import annotations

import random
import re
import signal
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from broker.log.batch import TimestampRules, check_produced
from broker.log.config import LogConfig
from broker.log.partition_log import PartitionLog
from quorum.errors import ErrorCode
from quorum.harness import ProcessCluster, wait_until
from quorum.kafka_peer import kafka_missing, run_tool
from quorum.rpc.v1 import admin_pb2, admin_pb2_grpc
from quorum.security.identity import ROLE_BROKER
from tests.process.test_kafka_data_process import (
    NO_GROUP,
    confluent_consume,
    create_topic,
    produce_raw,
    raw,
    seed,
    serving_cluster,
    ssl_config,
    wait_serving,
)
from tests.record_batches import Record, encode_batch


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    with serving_cluster(tmp_path_factory.mktemp("idempotent")) as cluster:
        yield cluster


def test_kill_9_with_retries_keeps_every_acknowledged_record_exactly_once(
    cluster: ProcessCluster,
) -> None:
    rng = random.Random(seed())
    topic = "exactly-once"
    create_topic(cluster, topic, on=101)
    acknowledged: dict[bytes, int] = {}
    errors: list[Any] = []
    stop = threading.Event()
    # The bootstrap is the other broker, which stays up: the producer finds the partition's
    # leader (101) through Metadata and follows it back after its restart.
    producer = Producer(
        {
            **ssl_config(cluster, broker=102),
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "batch.num.messages": 50,
            "message.timeout.ms": 120_000,
            "error_cb": errors.append,
        }
    )

    def delivered(error: Any, message: Any) -> None:
        if error is None:
            acknowledged[message.value()] = message.offset()
        else:
            errors.append(error)

    sent = 0

    def produce() -> None:
        nonlocal sent
        while not stop.is_set():
            value = f"{sent:08d}-".encode() + rng.randbytes(200)
            producer.produce(topic, partition=0, value=value, on_delivery=delivered)
            sent += 1
            producer.poll(0)
            if len(producer) > 2_000:
                producer.poll(0.01)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    try:
        wait_until(lambda: len(acknowledged) >= 3_000, 60, "3,000 acknowledged records")
        for _ in range(2):  # two crashes: each with batches written but not yet answered
            cluster.kill(101, signal.SIGKILL)
            cluster.start(101)
            wait_serving(cluster)
            before = len(acknowledged)
            wait_until(
                lambda b=before: len(acknowledged) >= b + 3_000, 120, "3,000 more after a restart"
            )
    finally:
        stop.set()
        thread.join(30)
    assert producer.flush(120) == 0, "records left undelivered"
    fatal = [e for e in errors if getattr(e, "fatal", lambda: False)()]
    assert not fatal, fatal
    assert len(acknowledged) == sent, (len(acknowledged), sent)
    consumer = Consumer({**ssl_config(cluster), "group.id": "idem", **NO_GROUP})
    try:
        _, end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        consumer.close()
    messages = confluent_consume(cluster, topic, end)
    values = [m.value() for m in messages]
    repeated = [v[:8] for v, n in Counter(values).items() if n > 1]
    assert not repeated, f"records appended more than once: {repeated[:10]}"
    assert end == sent  # every record once, nothing else
    for value, offset in acknowledged.items():
        assert values[offset] == value


def init_producer_id(cluster: ProcessCluster, broker: int) -> int:
    connection = raw(cluster, broker)
    try:
        answer = wait_until(
            lambda: (
                a
                if int(
                    (
                        a := connection.ask(
                            22, 4, {"transactional_id": None, "transaction_timeout": 60_000}
                        )
                    ).error_code
                )
                == 0
                else None
            ),
            30,
            f"a producer id from broker {broker}",
        )
    finally:
        connection.close()
    assert answer.producer_epoch == 0
    return int(answer.producer_id)


def test_retries_after_kill_9_are_answered_with_their_first_offsets(
    cluster: ProcessCluster,
) -> None:
    topic = "retried"
    create_topic(cluster, topic, on=101)
    pid = init_producer_id(cluster, 101)
    other = init_producer_id(cluster, 102)
    assert pid // 1000 != other // 1000, "two brokers share a producer id block"

    def batch(seq: int, tag: bytes = b"") -> bytes:
        records = [
            Record(f"{seq + i}".encode() + tag, b"v" * 40, 1_700_000_000_000, ()) for i in range(2)
        ]
        return encode_batch(records, producer_id=pid, producer_epoch=0, base_sequence=seq)

    connection = raw(cluster, 101)
    try:
        offsets = [
            int(produce_raw(connection, topic, batch(seq)).base_offset) for seq in range(0, 14, 2)
        ]
    finally:
        connection.close()
    assert offsets == list(range(0, 14, 2))
    # The active controller dies too: the broker's next block comes from its successor.
    leader = cluster.wait_for_leader(timeout_s=30)[0]
    cluster.kill(leader, signal.SIGKILL)
    cluster.kill(101, signal.SIGKILL)  # no clean close: no producer snapshot at the end
    cluster.start(101)
    wait_serving(cluster)
    connection = raw(cluster, 101)
    try:
        for index in range(2, 7):  # the last 5, retried: their first offsets, nothing appended
            answer = wait_until(
                lambda i=index: (
                    a
                    if int((a := produce_raw(connection, topic, batch(i * 2))).error_code) == 0
                    else None
                ),
                60,
                "the partition served again",
            )
            assert int(answer.base_offset) == offsets[index]
        stale = produce_raw(connection, topic, batch(2))  # the 6th newest: no longer retained
        assert int(stale.error_code) == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
        assert int(produce_raw(connection, topic, batch(14)).base_offset) == 14
    finally:
        connection.close()
    cluster.start(leader)
    after = init_producer_id(cluster, 101)
    assert after // 1000 not in (pid // 1000, other // 1000), "a producer id block given twice"
    assert len({pid, other, after}) == 3


def test_kafka_python_idempotent_producer_writes_each_record_once(
    cluster: ProcessCluster,
) -> None:
    from kafka import KafkaProducer  # noqa: PLC0415

    topic = "idempotent-python"
    create_topic(cluster, topic, on=102)
    assert cluster.certs is not None
    keystore = str(cluster.certs.client_keystore("admin"))
    producer = KafkaProducer(
        bootstrap_servers=cluster.nodes[101].kafka_address("KAFKA"),
        security_protocol="SSL",
        ssl_cafile=str(cluster.certs.ca),
        ssl_certfile=keystore,
        ssl_keyfile=keystore,
        ssl_check_hostname=False,
        enable_idempotence=True,
        acks="all",
    )
    try:
        futures = [producer.send(topic, value=f"{i:05d}".encode(), partition=0) for i in range(500)]
        producer.flush(60)
        offsets = [f.get(timeout=30).offset for f in futures]
    finally:
        producer.close(10)
    assert offsets == list(range(500))
    messages = confluent_consume(cluster, topic, 500)
    assert [m.value() for m in messages] == [f"{i:05d}".encode() for i in range(500)]


def allocate(cluster: ProcessCluster, as_node: int, broker_id: int, **kw: Any) -> Any:
    leader, _, _ = cluster.wait_for_leader(timeout_s=30)
    request = admin_pb2.AllocateProducerIdsRequest(broker_id=broker_id, broker_epoch=0)
    with cluster.channel(leader, cluster.node_security(as_node, **kw)) as channel:
        return admin_pb2_grpc.AdminServiceStub(channel).AllocateProducerIds(request, timeout=10)


def test_only_a_registered_broker_allocates_producer_ids_as_itself(
    cluster: ProcessCluster,
) -> None:
    by_controller = allocate(cluster, 1, 1)
    assert by_controller.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert "only a broker may send" in by_controller.error_message
    as_another = allocate(cluster, 102, 101)
    assert as_another.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert "broker_id 101 is not the caller" in as_another.error_message
    unregistered = allocate(cluster, 999, 999, roles=[ROLE_BROKER])
    assert unregistered.error_code == ErrorCode.STALE_BROKER_EPOCH
    assert "not registered" in unregistered.error_message
    for answer in (by_controller, as_another, unregistered):
        assert (answer.producer_id_start, answer.producer_id_len) == (-1, 0)
    with cluster.channel(cluster.wait_for_leader()[0], cluster.client_security("alice")) as ch:
        request = admin_pb2.AllocateProducerIdsRequest(broker_id=101, broker_epoch=0)
        client = admin_pb2_grpc.AdminServiceStub(ch).AllocateProducerIds(request, timeout=10)
    assert client.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def test_a_transactional_producer_is_refused(cluster: ProcessCluster) -> None:
    producer = Producer({**ssl_config(cluster), "transactional.id": "tx-1"})
    with pytest.raises(KafkaException) as caught:
        producer.init_transactions(5)
    # librdkafka asks for the transaction coordinator first: FindCoordinator names the broker
    # asked (it owns no transaction, docs/groups.md), whose InitProducerId with a
    # transactional id is UNSUPPORTED_VERSION (tests/unit/kafka/test_init_producer_id.py).
    # librdkafka retries that until the call's timeout and then reports it.
    error = caught.value.args[0]
    assert error.code() == KafkaError.UNSUPPORTED_VERSION, error
    assert "Failed to initialize Producer ID" in error.str()


@pytest.mark.skipif(kafka_missing() is not None, reason=f"Kafka's tools: {kafka_missing()}")
def test_the_java_producer_is_idempotent_by_default(cluster: ProcessCluster) -> None:
    """Kafka's own producer (ProducerPerformance, kafka-producer-perf-test.sh) with its
    defaults, idempotence on and acks=all: every record lands once."""
    topic = "java-producer"
    create_topic(cluster, topic, on=101)
    assert cluster.certs is not None
    result = run_tool(
        "org.apache.kafka.tools.ProducerPerformance",
        "--topic",
        topic,
        "--num-records",
        "20000",
        "--record-size",
        "200",
        "--throughput",
        "-1",
        "--command-config",
        str(cluster.certs.kafka_client_properties()),
        "--producer-props",
        f"bootstrap.servers={cluster.nodes[102].kafka_address('KAFKA')}",
        "enable.idempotence=true",
        "acks=all",
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "Exception" not in result.stderr, output[-3000:]
    assert "20000 records sent" in result.stdout, output[-3000:]
    consumer = Consumer({**ssl_config(cluster), "group.id": "java", **NO_GROUP})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 20_000)
    finally:
        consumer.close()


@pytest.mark.skipif(kafka_missing() is not None, reason=f"Kafka's tools: {kafka_missing()}")
def test_kafkas_dump_log_segments_reads_the_producer_snapshot(tmp_path: Path) -> None:
    """Kafka 4.4's own DumpLogSegments reads a snapshot a partition log wrote: every retained
    batch of each producer, with the sequences, offsets and epoch as written."""
    directory = tmp_path / "t-0"
    directory.mkdir()
    log = PartitionLog(
        directory,
        recovery_point=0,
        log_start_offset=0,
        now_ms=1_700_000_000_000,
        logger=structlog.get_logger(),
    )
    for pid in (1000, 1001):
        for seq in range(0, 14, 2):
            records = [
                Record(f"{pid}-{seq + i}".encode(), b"v", 1_700_000_000_000, ()) for i in range(2)
            ]
            data = encode_batch(records, producer_id=pid, producer_epoch=3, base_sequence=seq)
            batch = check_produced(
                data,
                produce_version=11,
                max_message_bytes=1 << 20,
                timestamps=TimestampRules(),
                now_ms=1_700_000_000_000,
            )
            log.append(batch, 5, LogConfig(), 1_700_000_000_000)
    log.close()
    result = run_tool(
        "org.apache.kafka.tools.DumpLogSegments",
        "--files",
        str(directory / f"{28:020d}.snapshot"),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    entries = [
        dict(re.findall(r"(\w+): (\S+)", line))
        for line in result.stdout.splitlines()
        if line.startswith("producerId:")
    ]
    assert [(e["producerId"], e["firstSequence"], e["lastOffset"]) for e in entries] == [
        (str(pid), str(seq), str(first + seq + 1))
        for pid, first in ((1000, 0), (1001, 14))
        for seq in range(4, 14, 2)
    ]
    assert {e["producerEpoch"] for e in entries} == {"3"}
