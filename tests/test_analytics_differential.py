"""Differential test: Spark's ``state_as_of(N)`` equals the real ``MetadataImage`` replayed to N.

Random histories (creates, deletes, recreations of a name, broker registrations, fencing) are
generated through the real ``ControllerStateMachine`` and written with the real encoder into
real segment files; the image replayed by ``MetadataDelta`` up to N is the reference.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from quorum.analytics import jobs
from quorum.analytics.source import load
from quorum.controller.requests import (
    BrokerHeartbeatRequest,
    CreatableTopic,
    CreateTopicsRequest,
    DeleteTopic,
    DeleteTopicsRequest,
    RegisterBrokerRequest,
)
from quorum.controller.state_machine import ControllerConfig, ControllerStateMachine
from quorum.ids import Uuid
from quorum.metadata.batch import LogBatch, decode_batch, encode_batch
from quorum.metadata.delta import replay_batches
from quorum.metadata.image import MetadataImage
from quorum.metadata.records import BrokerEndpoint, MetadataRecord
from quorum.metadata.snapshot_records import image_to_records
from quorum.storage import SegmentedLog
from quorum.storage.snapshots import write_snapshot

pytestmark = pytest.mark.spark

SEED = 20261121


def history(rng: random.Random) -> list[LogBatch]:
    """A few hundred records of admin and broker activity, committed batch by batch."""
    sm = ControllerStateMachine(config=ControllerConfig(broker_session_timeout_ms=1000), rng=rng)
    batches: list[LogBatch] = []
    offset = 0
    now = 0

    def commit(records: tuple[MetadataRecord, ...]) -> None:
        nonlocal offset
        if not records:
            return
        sm.replay_pending(list(records), offset)
        batch = encode_batch(base_offset=offset, epoch=1, timestamp_ms=now, records=list(records))
        sm.replay_committed(decode_batch(batch.data))
        batches.append(batch)
        offset = batch.end_offset

    epochs: dict[int, int] = {}
    for broker in (1, 2, 3):
        result = sm.register_broker(
            RegisterBrokerRequest(broker, Uuid.random(rng), (BrokerEndpoint("B", "h", 9),)),
            next_offset=offset,
            now_ms=now,
        )
        commit(result.records)
        epochs[broker] = result.response.broker_epoch
    for broker in (1, 2, 3):
        commit(
            sm.broker_heartbeat(
                BrokerHeartbeatRequest(broker, epochs[broker], 1 << 30),
                next_offset=offset,
                now_ms=now,
            ).records
        )
    names = [f"t{i}" for i in range(8)]
    for step in range(60):
        now += 100
        live = [t.name for t in sm.latest_image.topics_by_id.values() if not t.internal]
        action = rng.random()
        if action < 0.5 or not live:
            name = rng.choice(names)
            request = CreateTopicsRequest(
                (CreatableTopic(name, rng.randint(1, 3), rng.randint(1, 3)),)
            )
            commit(
                sm.create_topics(
                    request, next_offset=offset, new_topic_id=lambda: Uuid.random(rng)
                ).records
            )
        elif action < 0.8:
            delete = DeleteTopicsRequest((DeleteTopic(name=rng.choice(live)),))
            commit(sm.delete_topics(delete, next_offset=offset).records)
        else:
            # Heartbeats from two brokers only: the third is fenced when its session expires.
            for broker in (1, 2):
                commit(
                    sm.broker_heartbeat(
                        BrokerHeartbeatRequest(broker, epochs[broker], 1 << 30),
                        next_offset=offset,
                        now_ms=now,
                    ).records
                )
            if step > 30:
                commit(sm.fence_stale_brokers(now_ms=now, next_offset=offset).records)
    return batches


def image_rows(image: MetadataImage) -> list[tuple[Any, ...]]:
    rows = []
    for topic in image.topics_by_id.values():
        if topic.name == "__cluster_metadata":
            continue
        for p in topic.partitions.values():
            rows.append(
                (
                    str(topic.topic_id),
                    topic.name,
                    topic.internal,
                    p.partition,
                    list(p.replicas),
                    list(p.isr),
                    p.leader,
                    p.leader_epoch,
                    p.partition_epoch,
                )
            )
    return sorted(rows, key=lambda r: (r[1], r[3]))


def test_state_as_of_equals_the_image(spark: Any, tmp_path: Path) -> None:
    rng = random.Random(SEED)
    batches = history(rng)
    log = SegmentedLog.open(tmp_path / "__cluster_metadata-0", segment_bytes_max=4096)
    log.append(batches)
    log.flush()
    log.close()
    df = load(spark, tmp_path / "__cluster_metadata-0")
    ends = [b.end_offset for b in batches]
    checkpoints = sorted({ends[len(ends) // 4], ends[len(ends) // 2], ends[-1]} | {ends[5]})
    for end in checkpoints:
        image = replay_batches(
            MetadataImage.EMPTY, [decode_batch(b.data) for b in batches if b.end_offset <= end]
        )
        spark_rows = [
            tuple(row[c] for c in jobs.STATE_COLUMNS)
            for row in jobs.state_as_of(df, end - 1).collect()
            if row["partition"] is not None
        ]
        spark_rows = sorted(
            (tuple(list(v) if isinstance(v, list) else v for v in r) for r in spark_rows),
            key=lambda r: (r[1], r[3]),
        )
        assert spark_rows == image_rows(image), f"seed {SEED}: state as of {end - 1} differs"


def test_snapshot_rows_carry_topic_identity(spark: Any, tmp_path: Path) -> None:
    """A checkpoint written from a real image (snapshot-only records included) is read with
    includeSnapshots: every live topic's creation offset and every deleted id come back."""
    batches = history(random.Random(SEED))
    image = replay_batches(MetadataImage.EMPTY, [decode_batch(b.data) for b in batches])
    directory = tmp_path / "__cluster_metadata-0"
    log = SegmentedLog.open(directory, segment_bytes_max=4096)
    log.append(batches)
    log.flush()
    log.close()
    write_snapshot(directory, image.offset + 1, 1, image_to_records(image), 0)
    rows = load(spark, directory, includeSnapshots=True).filter("snapshot_end_offset IS NOT NULL")
    identities = {
        (r["topic_id"], r["creation_offset"])
        for r in rows.filter("record_type = 'TopicIdentityRecord'").collect()
    }
    expected = {
        (str(t.topic_id), t.creation_offset)
        for t in image.topics_by_id.values()
        if t.name != "__cluster_metadata"
    }
    assert expected <= identities
    deleted = rows.filter("record_type = 'DeletedTopicRecord'").count()
    assert deleted == len(image.deleted_topics) > 0
