"""The log cleaner on real processes (docs/kafka-listener.md#log-compaction): 3 controllers and
2 brokers over mTLS, the cleaner every 200 ms.

- A compacted topic written by confluent-kafka with repeated keys and tombstones, small
  segments, ``min.cleanable.dirty.ratio`` and ``delete.retention.ms`` low: its directory
  shrinks, and a consumer from offset 0 reads exactly the model's last values at their
  original offsets (tombstoned keys gone); the broker killed with SIGKILL and started again
  serves the same.
- A group committing many times: ``__consumer_offsets`` is compacted, and its coordinator,
  killed and started again, answers the last committed offset.
- Kafka's ``kafka-dump-log --deep-iteration`` reads a cleaned segment (tombstones with their
  delete horizon, an idempotent producer's emptied batch) as valid, at our offsets.

Randomness is seeded (``KAFKA_DATA_SEED``); waits are on conditions with deadlines.
"""

from __future__ import annotations

import dataclasses
import random
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

from quorum.harness import ProcessCluster, wait_until
from quorum.kafka_peer import kafka_missing, run_tool
from tests.process.test_kafka_data_process import (
    NO_GROUP,
    create_topic,
    seed,
    serving_cluster,
    ssl_config,
    wait_serving,
)
from tests.record_batches import decode_batches

DUMP_LOG = "org.apache.kafka.tools.DumpLogSegments"
SETTINGS = {
    "log.cleaner.backoff.ms": 200,
    "offsets.topic.num.partitions": 1,
    "offsets.topic.replication.factor": 1,
    "offsets.topic.segment.bytes": 4096,
}
COMPACTED = {
    "cleanup.policy": "compact",
    "segment.bytes": "4096",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "1000",
}
Model = dict[bytes, tuple[int, bytes | None]]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    with serving_cluster(tmp_path_factory.mktemp("cleaner"), broker_settings=SETTINGS) as cluster:
        yield cluster


def read_all(cluster: ProcessCluster, topic: str, end: int) -> list[tuple[int, Any, Any]]:
    """(offset, key, value) of every record of partition 0 from offset 0, until the consumer
    passed ``end`` - 1 (the log end offset; the last record of a compacted log is never
    cleaned: it is in the active segment)."""
    consumer = Consumer({**ssl_config(cluster), "group.id": f"reader-{uuid.uuid4()}", **NO_GROUP})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    found: list[tuple[int, Any, Any]] = []
    try:
        wait_until(
            lambda: _consume(consumer, found) >= end - 1, 60, f"{topic} read up to offset {end - 1}"
        )
    finally:
        consumer.close()
    return found


def _consume(consumer: Consumer, found: list[tuple[int, Any, Any]]) -> int:
    for message in consumer.consume(1_000, 0.5):
        assert message.error() is None, message.error()
        found.append((message.offset(), message.key(), message.value()))
    return found[-1][0] if found else -1


def produce(cluster: ProcessCluster, topic: str, rng: random.Random) -> tuple[Model, int]:
    """3,000 records over 40 keys, one in ten a tombstone, then 100 filler records of one
    key (so the rest is in sealed segments): the model's last (offset, value) per key and the
    log end offset."""
    producer = Producer({**ssl_config(cluster), "acks": "all", "linger.ms": 2})
    model: Model = {}
    errors: list[Any] = []

    def delivered(error: Any, message: Any) -> None:
        if error is not None:
            errors.append(error)
        else:
            model[message.key()] = (message.offset(), message.value())

    sent = [
        (f"key-{rng.randrange(40)}".encode(), None if rng.random() < 0.1 else rng.randbytes(20))
        for _ in range(3_000)
    ]
    sent += [(b"filler", rng.randbytes(40)) for _ in range(100)]
    for number, (key, value) in enumerate(sent):
        producer.produce(topic, partition=0, key=key, value=value, on_delivery=delivered)
        if number % 50 == 49:
            producer.flush(30)
    assert producer.flush(60) == 0
    assert not errors, errors[:3]
    return model, max(offset for offset, _ in model.values()) + 1


def compacted_view(records: list[tuple[int, Any, Any]]) -> dict[bytes, list[tuple[int, Any]]]:
    view: dict[bytes, list[tuple[int, Any]]] = {}
    for offset, key, value in records:
        view.setdefault(key, []).append((offset, value))
    return view


def expected_view(model: Model) -> dict[bytes, list[tuple[int, Any]]]:
    """Fully compacted: each key once, at its last offset, tombstoned keys gone (the filler
    key's records in the active segment are not compared)."""
    return {
        key: [(offset, value)]
        for key, (offset, value) in model.items()
        if value is not None and key != b"filler"
    }


def log_bytes(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.glob("*.log"))


def test_a_compacted_topic_keeps_the_last_value_per_key_across_a_kill_9(
    cluster: ProcessCluster,
) -> None:
    rng = random.Random(seed())
    topic = "compacted"
    create_topic(cluster, topic, configs=COMPACTED)
    directory = cluster.nodes[101].log_dir / f"{topic}-0"
    model, end = produce(cluster, topic, rng)
    expected = expected_view(model)
    produced_bytes = 3_100 * 40

    def compacted() -> bool:
        view = compacted_view(read_all(cluster, topic, end))
        view.pop(b"filler", None)
        return view == expected

    wait_until(compacted, 90, "the topic compacted to the model's last values")
    assert log_bytes(directory) < produced_bytes / 4
    records = read_all(cluster, topic, end)
    for offset, key, value in records:  # offsets kept: each record where it was written
        if key != b"filler":
            assert model[key] == (offset, value)
    # Killed and started again (recovery of cleaned segments, with gaps): the same.
    cluster.kill(101)
    cluster.start(101)
    wait_serving(cluster)
    assert read_all(cluster, topic, end) == records
    assert "log_cleaned" in cluster.logs(101)


def test_the_offsets_topic_is_compacted_and_the_coordinator_keeps_the_last_commit(
    cluster: ProcessCluster,
) -> None:
    topic = "committed"
    create_topic(cluster, topic)
    group = "many-commits"
    consumer = Consumer({**ssl_config(cluster), "group.id": group, "enable.auto.commit": False})
    try:
        for offset in range(1, 401):
            consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        consumer.close()
    holder = next(
        b for b in (101, 102) if (cluster.nodes[b].log_dir / "__consumer_offsets-0").is_dir()
    )
    directory = cluster.nodes[holder].log_dir / "__consumer_offsets-0"
    wait_until(
        lambda: len(list(directory.glob("*.log"))) < 4 or log_bytes(directory) < 8192,
        60,
        "__consumer_offsets-0 compacted",
    )
    assert '"log_cleaned"' in cluster.logs(holder) or "log_cleaned" in cluster.logs(holder)
    cluster.kill(holder)
    cluster.start(holder)
    wait_serving(cluster)
    reader = Consumer({**ssl_config(cluster), "group.id": group, "enable.auto.commit": False})
    try:

        def last_commit() -> bool:
            try:
                committed = reader.committed([TopicPartition(topic, 0)], timeout=5)
            except KafkaException:  # the coordinator may still be loading
                return False
            return committed[0].offset == 400

        wait_until(last_commit, 60, "the coordinator answers the last committed offset")
    finally:
        reader.close()


# ----- Kafka's own reading of a cleaned segment -------------------------------------------------


def test_kafka_dump_log_reads_a_cleaned_segment(tmp_path: Path) -> None:
    missing = kafka_missing()
    if missing is not None:
        pytest.skip(f"Kafka's tools cannot run: {missing}")
    from tests.unit.log.test_log_cleaner import (  # noqa: PLC0415
        COMPACT,
        NOW_MS,
        open_log,
        produced,
    )

    log = open_log(tmp_path / "t-0")
    config = dataclasses.replace(COMPACT, segment_bytes=40_000)
    # 200 keys written once (they stay: the cleaned segment gets offset-index entries), each
    # beside a record of a key overwritten later (so its batch is rewritten; gzip for half of
    # them, compressed again), then an idempotent producer's batches whose keys are all
    # overwritten later.
    for key in range(200):
        records = [(f"once-{key}".encode(), b"x" * 150), (b"a", b"old")]
        log.append(produced(records, compression=key % 2), 0, config, NOW_MS)
    sequence = 0
    for i in range(40):
        records = [(b"a", str(i).encode() * 20), (b"b", None if i % 3 == 0 else b"v" * 30)]
        log.append(produced(records, producer_id=5, base_sequence=sequence), 0, config, NOW_MS)
        sequence += 2
    for _ in range(300):
        log.append(produced([(b"a", b"w" * 60), (b"b", None)]), 0, config, NOW_MS)
    log.update_high_watermark(log.log_end_offset)
    assert log.clean(config, NOW_MS) is not None
    segments = [s.path for s in log.segments[:-1]]
    log.close()
    ours = [
        (b.base_offset, r.offset, r.key, r.value)
        for path in segments
        for b in decode_batches(path.read_bytes())
        for r in b.records
    ]
    assert ours, "the clean left nothing to read"
    result = run_tool(
        DUMP_LOG, "--files", ",".join(map(str, segments)), "--deep-iteration", "--print-data-log"
    )
    assert result.returncode == 0, result.stderr
    assert "isvalid: false" not in result.stdout
    assert "compresscodec: gzip" in result.stdout
    assert "isValid: false" not in result.stdout
    offsets = [int(m[1]) for m in re.finditer(r"^\| offset: (\d+)", result.stdout, re.MULTILINE)]
    assert offsets == [offset for _, offset, _, _ in ours], result.stdout[-3000:]
    # The producer's emptied last batch is there, empty, with its offsets.
    assert re.search(r"count: 0 .*producerId: 5 ", result.stdout), result.stdout[-3000:]
    batches = sum(len(decode_batches(path.read_bytes())) for path in segments)
    assert result.stdout.count("isvalid: true") == batches
    # The rebuilt indexes pass Kafka's checks (an entry not at a batch holding its offset is
    # reported as a mismatch).
    indexes = ",".join(
        str(path.with_suffix(suffix)) for path in segments for suffix in (".index", ".timeindex")
    )
    assert segments[0].with_suffix(".index").stat().st_size > 0, "no offset-index entry"
    sane = run_tool(DUMP_LOG, "--files", indexes, "--index-sanity-check")
    assert sane.returncode == 0, sane.stderr
    checked = sane.stdout.count("passed sanity check.") + sane.stdout.count("is empty.")
    assert checked == 2 * len(segments), sane.stdout
    verify = run_tool(DUMP_LOG, "--files", indexes, "--verify-index-only")
    assert verify.returncode == 0, verify.stderr
    problems = [
        line
        for line in verify.stdout.splitlines()
        if not line.startswith("Dumping ") and not line.endswith(" is empty.")
    ]
    assert problems == [], verify.stdout
