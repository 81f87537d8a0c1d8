"""The data plane with Kafka's own clients against real processes
(docs/kafka-listener.md#the-data-plane): 3 controllers and 2 brokers, mTLS and ACLs on, every
broker with an SSL Kafka listener. confluent-kafka (librdkafka) and kafka-python produce 10,000
records and read them back byte for byte (keys, values, headers, timestamps, offsets dense from
0); the KIP-516 story on data (a recreated topic starts again at 0, the old id is
UNKNOWN_TOPIC_ID, the old records are never served); kill -9 of a broker mid-produce (every
acknowledged record readable at its offset after the restart, a torn tail cut, never served);
hostile bytes over the raw wire, each answered with Kafka's error while everything acknowledged
stays readable. Idempotent producers have their own module
(tests/process/test_idempotent_producer_process.py).

One cluster for the module; each test uses topics of its own. Randomness is seeded and the seed
printed (``KAFKA_DATA_SEED=<seed>`` replays it).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import threading
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
from tests.record_batches import Record, decode_batches, encode_batch

BROKERS = (101, 102)
RECORDS = 10_000
# Consumers with assign() and no group (groups are not served yet): librdkafka needs a group id
# all the same, and must not try to commit offsets to a coordinator there is none of (its
# close would wait for one).
NO_GROUP = {"enable.auto.commit": False, "enable.auto.offset.store": False}


def seed() -> int:
    value = int(os.environ.get("KAFKA_DATA_SEED", str(random.SystemRandom().randrange(2**32))))
    print(f"KAFKA_DATA_SEED={value}")
    return value


def listening(address: str) -> bool:
    host, port = address.split(":")
    try:
        socket.create_connection((host, int(port)), timeout=0.5).close()
    except OSError:
        return False
    return True


def ssl_config(cluster: ProcessCluster, broker: int = 101, name: str = "admin") -> dict[str, Any]:
    assert cluster.certs is not None
    keystore = str(cluster.certs.client_keystore(name))
    return {
        "bootstrap.servers": cluster.nodes[broker].kafka_address("KAFKA"),
        "security.protocol": "SSL",
        "ssl.ca.location": str(cluster.certs.ca),
        "ssl.certificate.location": keystore,
        "ssl.key.location": keystore,
    }


def raw(cluster: ProcessCluster, broker: int = 101, name: str = "admin") -> RawConnection:
    assert cluster.certs is not None
    return RawConnection(
        cluster.nodes[broker].kafka_address("KAFKA"),
        (str(cluster.certs.ca), str(cluster.certs.client_keystore(name))),
    )


def wait_serving(cluster: ProcessCluster) -> None:
    for broker_id in BROKERS:
        address = cluster.nodes[broker_id].kafka_address("KAFKA")
        wait_until(lambda a=address: listening(a), 60, f"Kafka listener {address}")
    with cluster.admin() as admin:
        wait_until(
            lambda: sum(not b.is_fenced for b in admin.describe_cluster().brokers) == 2,
            60,
            "both brokers unfenced",
        )


@contextlib.contextmanager
def serving_cluster(
    root: Path, *, check_handlers: bool = True, broker_settings: dict[str, Any] | None = None
) -> Iterator[ProcessCluster]:
    """3 controllers and the brokers of ``BROKERS``, each with an SSL Kafka listener, started
    and serving (the cluster of the data-plane process tests); with ``check_handlers``, on the
    way out no request a client sent made a handler fail. ``broker_settings``: more config
    keys for every broker."""
    with process_cluster(
        root,
        brokers=len(BROKERS),
        kafka_listeners={"KAFKA": "SSL"},
        broker_settings=dict(broker_settings or {}),
    ) as cluster:
        cluster.format()
        cluster.start_all()
        cluster.wait_for_leader(timeout_s=30)
        wait_serving(cluster)
        yield cluster
        if check_handlers:
            for broker_id in BROKERS:
                assert "kafka_request_failed" not in cluster.logs(broker_id)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    with serving_cluster(tmp_path_factory.mktemp("kafka-data")) as cluster:
        yield cluster


def create_topic(
    cluster: ProcessCluster,
    name: str,
    *,
    partitions: int = 1,
    on: int | None = 101,
    replication: int = 1,
    configs: dict[str, str] | None = None,
) -> None:
    admin = AdminClient(ssl_config(cluster))
    topic = (
        NewTopic(name, partitions, replica_assignment=[[on]] * partitions, config=configs or {})
        if on is not None
        else NewTopic(name, partitions, replication, config=configs or {})
    )
    for future in admin.create_topics([topic]).values():
        future.result(timeout=30)
    wait_until(
        lambda: all(
            (cluster.nodes[b].log_dir / f"{name}-{p}").is_dir()
            for p in range(partitions)
            for b in ([on] if on is not None else [])
        ),
        30,
        f"the directories of {name}",
    )


def make_records(rng: random.Random, count: int) -> list[Record]:
    now_ms = time.time_ns() // 1_000_000
    return [
        Record(
            f"key-{i}".encode() if i % 10 else None,
            rng.randbytes(1_000),
            now_ms - rng.randrange(86_400_000),  # within the last day, in no order
            (("index", str(i).encode()), ("blob", rng.randbytes(rng.randrange(0, 20)))),
        )
        for i in range(count)
    ]


def confluent_produce(
    cluster: ProcessCluster, topic: str, records: list[Record], acks: str
) -> list[int]:
    """Produce ``records`` in order to partition 0; the offset each was acknowledged at."""
    producer = Producer({**ssl_config(cluster), "acks": acks, "linger.ms": 5})
    offsets: list[int | None] = [None] * len(records)
    errors: list[Any] = []

    def delivered(index: int) -> Any:
        def callback(error: Any, message: Any) -> None:
            if error is not None:
                errors.append(error)
            else:
                offsets[index] = message.offset()

        return callback

    for index, record in enumerate(records):
        producer.produce(
            topic,
            partition=0,
            key=record.key,
            value=record.value,
            headers=list(record.headers),
            timestamp=record.timestamp,
            on_delivery=delivered(index),
        )
        producer.poll(0)
    assert producer.flush(60) == 0
    assert not errors, errors[:3]
    assert all(o is not None for o in offsets)
    return [o for o in offsets if o is not None]


def confluent_consume(
    cluster: ProcessCluster, topic: str, count: int, start: int = OFFSET_BEGINNING
) -> list[Any]:
    consumer = Consumer(
        {**ssl_config(cluster, 102), "group.id": f"reader-{uuid.uuid4()}", **NO_GROUP}
    )
    consumer.assign([TopicPartition(topic, 0, start)])
    messages: list[Any] = []
    deadline = time.monotonic() + 60
    try:
        while len(messages) < count and time.monotonic() < deadline:
            for message in consumer.consume(1_000, 1.0):
                assert message.error() is None, message.error()
                messages.append(message)
    finally:
        consumer.close()
    return messages


def assert_same(records: list[Record], messages: list[Any], first_offset: int = 0) -> None:
    assert [m.offset() for m in messages] == list(range(first_offset, first_offset + len(records)))
    for record, message in zip(records, messages, strict=True):
        assert message.key() == record.key
        assert message.value() == record.value
        assert tuple(message.headers() or ()) == record.headers
        assert message.timestamp() == (1, record.timestamp)  # (CreateTime, ms)


# ----- real clients --------------------------------------------------------------------------


@pytest.mark.parametrize("acks", ["1", "all"])
def test_confluent_kafka_produces_and_reads_back_10000_records(
    cluster: ProcessCluster, acks: str
) -> None:
    rng = random.Random(seed())
    topic = f"confluent-acks-{acks}"
    create_topic(cluster, topic)
    records = make_records(rng, RECORDS)
    assert confluent_produce(cluster, topic, records, acks) == list(range(RECORDS))
    messages = confluent_consume(cluster, topic, RECORDS)
    assert_same(records, messages)
    # ListOffsets through the client: earliest and latest, and by timestamp.
    consumer = Consumer({**ssl_config(cluster), "group.id": "offsets", **NO_GROUP})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, RECORDS)
        target = sorted(r.timestamp for r in records)[RECORDS // 2]
        (found,) = consumer.offsets_for_times([TopicPartition(topic, 0, target)], timeout=10)
        expected = next(i for i, r in enumerate(records) if r.timestamp >= target)
        assert found.offset == expected
    finally:
        consumer.close()


def test_kafka_python_produces_and_reads_back_10000_records(cluster: ProcessCluster) -> None:
    from kafka import KafkaConsumer, KafkaProducer  # noqa: PLC0415
    from kafka import TopicPartition as KafkaTopicPartition  # noqa: PLC0415

    rng = random.Random(seed())
    topic = "kafka-python-data"
    create_topic(cluster, topic)
    records = make_records(rng, RECORDS)
    assert cluster.certs is not None
    keystore = str(cluster.certs.client_keystore("admin"))
    security = {
        "bootstrap_servers": cluster.nodes[101].kafka_address("KAFKA"),
        "security_protocol": "SSL",
        "ssl_cafile": str(cluster.certs.ca),
        "ssl_certfile": keystore,
        "ssl_keyfile": keystore,
    }
    producer = KafkaProducer(acks=1, linger_ms=5, **security)
    futures = [
        producer.send(
            topic,
            partition=0,
            key=r.key,
            value=r.value,
            headers=list(r.headers),
            timestamp_ms=r.timestamp,
        )
        for r in records
    ]
    producer.flush(60)
    assert [f.get(timeout=30).offset for f in futures] == list(range(RECORDS))
    producer.close()
    consumer = KafkaConsumer(enable_auto_commit=False, **security)
    partition = KafkaTopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek_to_beginning(partition)
    read: list[Any] = []
    deadline = time.monotonic() + 60
    while len(read) < RECORDS and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=1_000).values():
            read += batch
    consumer.close()
    assert [m.offset for m in read] == list(range(RECORDS))
    for record, message in zip(records, read, strict=True):
        assert (message.key, message.value, message.timestamp) == (
            record.key,
            record.value,
            record.timestamp,
        )
        assert tuple(message.headers) == record.headers


# ----- KIP-516 on data -------------------------------------------------------------------------


def fetch_by_id(cluster: ProcessCluster, topic_id: uuid.UUID, offset: int = 0) -> Any:
    connection = raw(cluster)
    try:
        answer = connection.ask(
            1,
            17,
            {
                "max_wait": 0,
                "min_bytes": 1,
                "max_bytes": 1 << 22,
                "session_epoch": -1,
                "topics": [
                    {
                        "topic_id": topic_id,
                        "partitions": [
                            {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 22}
                        ],
                    }
                ],
                "forgotten_topics_data": [],
            },
        )
    finally:
        connection.close()
    return answer.responses[0].partitions[0]


def topic_id_of(cluster: ProcessCluster, name: str) -> uuid.UUID:
    connection = raw(cluster)
    try:
        answer = connection.ask(3, 12, {"topics": [{"name": name, "topic_id": None}]})
    finally:
        connection.close()
    (topic,) = answer.topics
    assert int(topic.error_code) == 0
    return topic.topic_id  # type: ignore[no-any-return]


def test_kip_516_a_recreated_topic_serves_only_its_own_records(cluster: ProcessCluster) -> None:
    rng = random.Random(seed())
    create_topic(cluster, "orders")
    old_records = make_records(rng, 300)
    confluent_produce(cluster, "orders", old_records, "1")
    old_id = topic_id_of(cluster, "orders")
    admin = AdminClient(ssl_config(cluster))
    for future in admin.delete_topics(["orders"]).values():
        future.result(timeout=30)
    log_dir = cluster.nodes[101].log_dir
    wait_until(
        lambda: (
            (log_dir / "deleting").is_dir()
            and any(
                n.startswith(f"{_kafka_id(old_id)}_0") for n in os.listdir(log_dir / "deleting")
            )
        ),
        30,
        "the old directory moved to deleting/",
    )
    create_topic(cluster, "orders")
    new_id = topic_id_of(cluster, "orders")
    assert new_id != old_id
    new_records = make_records(rng, 50)
    assert confluent_produce(cluster, "orders", new_records, "1") == list(range(50))
    # The old id is unknown; the new one serves its own records from offset 0.
    assert int(fetch_by_id(cluster, old_id).error_code) == 100  # UNKNOWN_TOPIC_ID
    fetched = fetch_by_id(cluster, new_id)
    assert int(fetched.error_code) == 0
    assert (fetched.log_start_offset, fetched.high_watermark) == (0, 50)
    served = [r for b in decode_batches(fetched.records) for r in b.records]
    assert [r.value for r in served] == [r.value for r in new_records]
    assert_same(new_records, confluent_consume(cluster, "orders", 50))
    # The old incarnation's bytes are only in deleting/, never in the live directory.
    live = b"".join(p.read_bytes() for p in (log_dir / "orders-0").glob("*.log"))
    assert old_records[0].value not in live and new_records[0].value in live


def _kafka_id(value: uuid.UUID) -> str:
    import base64  # noqa: PLC0415

    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


# ----- kill -9 mid-produce ----------------------------------------------------------------------


def test_kill_9_mid_produce_keeps_every_acknowledged_record(cluster: ProcessCluster) -> None:
    rng = random.Random(seed())
    topic = "crash"
    create_topic(cluster, topic, on=101)
    acknowledged: dict[int, bytes] = {}
    stop = threading.Event()
    producer = Producer(
        {
            **ssl_config(cluster),
            "acks": "1",
            "linger.ms": 2,
            "message.timeout.ms": 5_000,
            "retries": 0,
        }
    )

    def delivered(error: Any, message: Any) -> None:
        if error is None:
            acknowledged[message.offset()] = message.value()

    def produce() -> None:
        while not stop.is_set():
            producer.produce(topic, partition=0, value=rng.randbytes(500), on_delivery=delivered)
            producer.poll(0)
            if len(producer) > 5_000:
                producer.poll(0.01)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    try:
        wait_until(lambda: len(acknowledged) >= 5_000, 60, "5,000 acknowledged records")
        cluster.kill(101, signal.SIGKILL)
    finally:
        stop.set()
        thread.join(30)
    producer.flush(15)
    acked = dict(acknowledged)
    # A write in flight when the process died: a torn batch at the end of the active segment.
    directory = cluster.nodes[101].log_dir / f"{topic}-0"
    active = sorted(directory.glob("*.log"))[-1]
    torn = encode_batch([Record(b"torn", b"never served", 1, ())])[:-7]
    with open(active, "ab") as file:
        file.write(torn)
    cluster.start(101)
    wait_serving(cluster)
    consumer = Consumer({**ssl_config(cluster), "group.id": "crash", **NO_GROUP})
    try:  # the first request to touch the partition opens (recovers) its log
        _, end = wait_until(
            lambda: consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=5),
            60,
            "the partition served again",
        )
    finally:
        consumer.close()
    (truncated,) = [
        e for e in cluster.events(101, "log_tail_truncated") if e["segment"] == active.name
    ]
    assert truncated["bytes_truncated"] >= len(torn)
    assert truncated["log_end_offset"] == end
    assert acked and max(acked) < end
    messages = confluent_consume(cluster, topic, end)
    assert [m.offset() for m in messages] == list(range(end))  # dense, nothing past the end
    for offset, value in acked.items():
        assert messages[offset].value() == value
    assert all(m.value() != b"never served" for m in messages)
    # The log takes appends again after the recovered end.
    assert confluent_produce(cluster, topic, make_records(rng, 3), "1") == [end, end + 1, end + 2]


# ----- hostile bytes over the raw wire ----------------------------------------------------------


def produce_raw(
    connection: RawConnection, topic: str, records: bytes | None, partition: int = 0, acks: int = 1
) -> Any:
    answer = connection.ask(
        0,
        9,
        {
            "acks": acks,
            "timeout": 10_000,
            "topic_data": [
                {"name": topic, "partition_data": [{"index": partition, "records": records}]}
            ],
        },
    )
    return answer.responses[0].partition_responses[0]


def test_bad_input_gets_kafkas_errors_and_loses_nothing(cluster: ProcessCluster) -> None:
    rng = random.Random(seed())
    create_topic(cluster, "hostile", partitions=2)
    good = [Record(b"k", rng.randbytes(50), 1_700_000_000_000 + i, ()) for i in range(5)]
    batch = encode_batch(good)
    connection = raw(cluster)
    try:
        assert produce_raw(connection, "hostile", batch).base_offset == 0
        corrupt = bytearray(batch)
        corrupt[-1] ^= 0x55
        cases = [
            ("a corrupt CRC", bytes(corrupt), 0, 2),  # CORRUPT_MESSAGE
            ("magic 1", batch[:16] + b"\x01" + batch[17:], 0, 87),  # INVALID_RECORD
            ("a batch longer than its bytes", batch[:-20], 0, 87),
            (
                "a negative length",
                batch[:8] + (-9).to_bytes(4, "big", signed=True) + batch[12:],
                0,
                2,
            ),
            ("an unknown partition", batch, 7, 3),  # UNKNOWN_TOPIC_OR_PARTITION
        ]
        for what, records, partition, code in cases:
            answer = produce_raw(connection, "hostile", records, partition)
            assert int(answer.error_code) == code, what
            assert answer.error_message, what
        # a records field longer than the frame: the request does not decode, closed
        frame = bytearray()
        connection.correlation_id += 1
        from tests.kafka_raw import request_frame  # noqa: PLC0415

        frame += request_frame(
            0,
            9,
            {
                "acks": 1,
                "timeout": 1000,
                "topic_data": [
                    {"name": "hostile", "partition_data": [{"index": 1, "records": batch}]}
                ],
            },
            connection.correlation_id,
        )
        cut = frame[: len(frame) - 30]
        cut[:4] = (len(cut) - 4).to_bytes(4, "big")
        connection.send(bytes(cut))
        assert connection.read_answer() is None  # closed
    finally:
        connection.close()
    connection = raw(cluster)
    try:
        # the other partition keeps serving; nothing acknowledged was lost
        assert produce_raw(connection, "hostile", batch, partition=1).base_offset == 0
        out_of_range = connection.ask(
            1,
            12,
            {
                "max_wait": 0,
                "min_bytes": 1,
                "max_bytes": 1 << 20,
                "session_epoch": -1,
                "topics": [
                    {
                        "topic": "hostile",
                        "partitions": [
                            {"partition": 0, "fetch_offset": 99, "partition_max_bytes": 1 << 20},
                            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20},
                        ],
                    }
                ],
                "forgotten_topics_data": [],
            },
        )
        far, start = out_of_range.responses[0].partitions
        assert int(far.error_code) == 1 and (far.high_watermark, far.log_start_offset) == (5, 0)
        assert int(start.error_code) == 0
        (stored,) = decode_batches(start.records)
        assert [r.value for r in stored.records] == [r.value for r in good]
    finally:
        connection.close()


def test_acks_all_waits_for_min_insync_replicas_and_writes_need_write(
    cluster: ProcessCluster,
) -> None:
    create_topic(
        cluster, "two-replicas", on=None, replication=2, configs={"min.insync.replicas": "2"}
    )
    batch = encode_batch([Record(b"k", b"v", 1_700_000_000_000, ())])
    with cluster.admin() as admin:
        described = admin.describe_topics(TopicCollection.of_topic_names(["two-replicas"]))
        leader = described.all_topic_names()["two-replicas"].partitions[0].leader
    # Both replicas in the ISR (the follower fetches from the leader): acks=all is answered
    # once both hold the batch (retried while the leader's directory is being made, answered
    # NOT_LEADER_OR_FOLLOWER meanwhile). Below min.insync.replicas it is refused
    # (tests/process/test_replication_process.py).
    connection = raw(cluster, leader)
    try:
        wait_until(
            lambda: int(produce_raw(connection, "two-replicas", batch, acks=-1).error_code) == 0,
            30,
            "acks=all accepted with both replicas in sync",
        )
    finally:
        connection.close()
    # ACLs: a principal without WRITE is refused, with it allowed.
    create_topic(cluster, "guarded")
    alice = raw(cluster, name="alice")
    try:
        assert int(produce_raw(alice, "guarded", batch).error_code) == 29
    finally:
        alice.close()
    from quorum.security.acls import (  # noqa: PLC0415
        AclBinding,
        AclOperation,
        AclPermissionType,
        PatternType,
        ResourceType,
    )

    with cluster.admin() as admin:
        admin.create_acls(
            [
                AclBinding(
                    ResourceType.TOPIC,
                    "guarded",
                    PatternType.LITERAL,
                    "User:CN=alice",
                    "*",
                    AclOperation.WRITE,
                    AclPermissionType.ALLOW,
                )
            ]
        )

    def allowed() -> bool:
        connection = raw(cluster, name="alice")
        try:
            return int(produce_raw(connection, "guarded", batch).error_code) == 0
        finally:
            connection.close()

    wait_until(allowed, 30, "alice's WRITE ACL applied on the broker")


def test_the_segments_are_in_kafkas_layout(cluster: ProcessCluster) -> None:
    """What a process wrote: Kafka's file names and a .log that decodes as record batches."""
    create_topic(cluster, "layout")
    records = make_records(random.Random(seed()), 200)
    confluent_produce(cluster, "layout", records, "1")
    directory = cluster.nodes[101].log_dir / "layout-0"
    names = sorted(os.listdir(directory))
    assert {"00000000000000000000.log", "00000000000000000000.index"} <= set(names)
    assert {
        "00000000000000000000.timeindex",
        "leader-epoch-checkpoint",
        "partition.metadata",
    } <= set(names)
    stored = decode_batches((directory / "00000000000000000000.log").read_bytes())
    assert [r.value for b in stored for r in b.records] == [r.value for r in records]
    assert Path(directory / "leader-epoch-checkpoint").read_text().startswith("0\n1\n")
