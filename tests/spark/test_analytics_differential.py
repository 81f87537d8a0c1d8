"""Differential test: Spark's ``state_as_of(N)`` equals the real ``MetadataImage`` replayed to N.

Random histories (creates, deletes, recreations of a name, broker registrations, fencing,
producer-id blocks) are generated through the real ``ControllerStateMachine`` and written with
the real encoder into real segment files; the image replayed by ``MetadataDelta`` up to N is
the reference.

Across a snapshot boundary: real ``.checkpoint`` files are written (``write_snapshot`` of the
image at a batch end) and the log before the newest one is deleted as a controller deletes it
(``SegmentedLog.delete_before``); Spark reads the directory with ``includeSnapshots`` and its
state as of N must still equal the image for every N the files determine (at the boundary and
after it), name the earliest available offset for the others, and the topic lifecycle must
still list every topic id ever created with its creation and deletion offsets. Seeds are in
the test ids (``-k 'seed-7'`` replays one); ``ANALYTICS_SEEDS=N`` runs N more.
"""

from __future__ import annotations

import io
import os
import random
from functools import reduce
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from quorum.analytics import jobs
from quorum.analytics.jobs import Coverage, StateNotAvailableError
from quorum.analytics.replay import run_replay
from quorum.analytics.source import load
from quorum.controller.requests import (
    AllocateProducerIdsRequest,
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

SEED = 20261121


def history(rng: random.Random, steps: int = 60) -> list[LogBatch]:
    """Admin and broker activity (about 1.5 records per step), committed batch by batch."""
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
    for step in range(steps):
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
            # A producer-id block (ProducerIdsRecord; in snapshots with broker id -1).
            commit(
                sm.allocate_producer_ids(
                    AllocateProducerIdsRequest(1, epochs[1]), next_offset=offset
                ).records
            )
            if step > steps // 2:
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
    df = load(spark, tmp_path / "__cluster_metadata-0").cache()
    ends = [b.end_offset for b in batches]
    checkpoints = sorted({ends[len(ends) // 4], ends[len(ends) // 2], ends[-1]} | {ends[5]})
    got = spark_state(df, [end - 1 for end in checkpoints], Coverage(0))
    df.unpersist()
    for end in checkpoints:
        image = replay_batches(
            MetadataImage.EMPTY, [decode_batch(b.data) for b in batches if b.end_offset <= end]
        )
        assert got[end - 1] == image_rows(image), f"seed {SEED}: state as of {end - 1} differs"


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
        (r["topic_id"], r["topic"]["creation_offset"])
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


# ----- across a snapshot boundary -----------------------------------------------------------

# (seed, whether the older snapshot is kept beside the newer one).
SNAPSHOT_CASES = [(SEED, True), (7, False), (31337, True)] + [
    (1000 + n, n % 2 == 0) for n in range(int(os.environ.get("ANALYTICS_SEEDS", "0")))
]


def spark_state(df: Any, offsets: list[int], coverage: Coverage) -> dict[int, list[Any]]:
    """``state_as_of`` at several offsets in one Spark job, as ``image_rows`` lists them."""
    frames = [jobs.state_as_of(df, n, coverage).withColumn("as_of", F.lit(n)) for n in offsets]
    rows = reduce(lambda a, b: a.unionByName(b), frames).collect()
    found: dict[int, list[Any]] = {n: [] for n in offsets}
    for row in rows:
        if row["partition"] is not None:
            values = tuple(list(v) if isinstance(v, list) else v for v in row[:-1])
            found[row["as_of"]].append(values)
    return {n: sorted(r, key=lambda r: (r[1], r[3])) for n, r in found.items()}


def lifecycle_of(image: MetadataImage) -> set[tuple[Any, ...]]:
    """(topic_id, name, created_offset, deleted_offset) of every topic id the image knows."""
    alive = {
        (str(t.topic_id), t.name, t.creation_offset, None)
        for t in image.topics_by_id.values()
        if t.name != "__cluster_metadata"
    }
    gone = {
        (str(d.topic_id), d.name, d.creation_offset, d.deletion_offset)
        for d in image.deleted_topics.values()
    }
    return alive | gone


@pytest.mark.parametrize(
    ("seed", "keep_older"),
    SNAPSHOT_CASES,
    ids=[f"seed-{seed}-{'older-kept' if kept else 'newest-only'}" for seed, kept in SNAPSHOT_CASES],
)
def test_state_as_of_across_a_snapshot_boundary(
    spark: Any, tmp_path: Path, seed: int, keep_older: bool
) -> None:
    rng = random.Random(seed)
    batches = history(rng, steps=150)
    decoded = [decode_batch(b.data) for b in batches]
    ends = [b.end_offset for b in batches]

    def image_at(offset: int) -> MetadataImage:
        return replay_batches(
            MetadataImage.EMPTY, [d for d, e in zip(decoded, ends, strict=True) if e <= offset + 1]
        )

    directory = tmp_path / "__cluster_metadata-0"
    log = SegmentedLog.open(directory, segment_bytes_max=1024)
    log.append(batches)
    log.flush()
    # Snapshots at two batch ends, written from the real image as a controller writes them.
    older, newer = ends[len(ends) // 3], ends[2 * len(ends) // 3]
    for end in (older, newer) if keep_older else (newer,):
        index = ends.index(end)
        image = image_at(end - 1)
        assert image.offset + 1 == end
        write_snapshot(directory, end, 1, image_to_records(image), decoded[index].timestamp_ms)
    log_start = log.delete_before(newer)
    log.close()
    assert 0 < log_start <= newer, f"seed {seed}: the log before the snapshot was not deleted"

    df = load(spark, directory, includeSnapshots=True).cache()
    try:
        coverage = Coverage.of(df)
        snapshot_ends = (older, newer) if keep_older else (newer,)
        assert coverage == Coverage(log_start, snapshot_ends), f"seed {seed}"
        assert Coverage.of_listing(directory, includeSnapshots=True) == coverage, f"seed {seed}"

        # At the boundary, the first batch after it, the middle of the rest, the end, and past
        # the end; with the older snapshot kept, its own boundary too.
        after = [e - 1 for e in ends if e > newer]
        offsets = [newer - 1, after[0], after[len(after) // 2], after[-1], ends[-1] + 5]
        if keep_older:
            offsets.append(older - 1)
        got = spark_state(df, offsets, coverage)
        for n in offsets:
            expected = image_rows(image_at(min(n, ends[-1] - 1)))
            assert got[n] == expected, f"seed {seed}: state as of {n} differs"

        # Offsets the files do not determine: the error names the earliest one available.
        earliest = older - 1 if keep_older else newer - 1
        assert coverage.earliest() == earliest
        missing = [e - 1 for e in ends if e - 1 < newer - 1 and e - 1 != earliest]
        for n in [missing[0], missing[-1]]:
            with pytest.raises(
                StateNotAvailableError, match=f"earliest offset available is {earliest}"
            ):
                jobs.state_as_of(df, n, coverage)

        # Every topic id ever created is listed, also those created (and deleted) inside the
        # deleted part of the log, with the creation and deletion offsets of the image.
        lifecycle = {
            (r["topic_id"], r["name"], r["created_offset"], r["deleted_offset"])
            for r in jobs.topic_lifecycle(df).collect()
        }
        assert lifecycle == lifecycle_of(image_at(ends[-1] - 1)), f"seed {seed}"
        # Creation times are known exactly for the topics created in the log that is left.
        timed = jobs.topic_lifecycle(df).filter("created_time IS NOT NULL").collect()
        assert all(r["created_offset"] >= log_start for r in timed), f"seed {seed}"
        reuse = {r["name"]: r["topic_ids"] for r in jobs.name_reuse(df).collect()}
        by_name: dict[str, list[tuple[int, str]]] = {}
        for topic_id, name, created, _ in lifecycle:
            by_name.setdefault(name, []).append((created, topic_id))
        assert reuse == {
            name: [t for _, t in sorted(ids)] for name, ids in by_name.items() if len(ids) > 1
        }, f"seed {seed}"
    finally:
        df.unpersist()


def test_a_log_from_zero_read_with_its_snapshot_gives_the_same_states(
    spark: Any, tmp_path: Path
) -> None:
    """A snapshot next to a complete log: the states built on it equal those of the log alone."""
    batches = history(random.Random(SEED), steps=100)
    ends = [b.end_offset for b in batches]
    directory = tmp_path / "__cluster_metadata-0"
    log = SegmentedLog.open(directory, segment_bytes_max=1024)
    log.append(batches)
    log.flush()
    log.close()
    middle = ends[len(ends) // 2]
    image = replay_batches(
        MetadataImage.EMPTY, [decode_batch(b.data) for b in batches[: len(ends) // 2 + 1]]
    )
    assert image.offset + 1 == middle
    write_snapshot(directory, middle, 1, image_to_records(image), 0)
    with_snapshot = load(spark, directory, includeSnapshots=True).cache()
    try:
        coverage = Coverage.of_listing(directory, includeSnapshots=True)
        assert coverage == Coverage(0, (middle,))
        offsets = [ends[2] - 1, middle - 1, middle, ends[-1] - 1]
        assert coverage.base_for(ends[2] - 1) == 0
        assert coverage.base_for(middle - 1) == coverage.base_for(middle) == middle
        log_only = with_snapshot.filter("snapshot_end_offset IS NULL")
        assert spark_state(with_snapshot, offsets, coverage) == spark_state(
            log_only, offsets, Coverage(0)
        )
        lifecycle = jobs.topic_lifecycle(with_snapshot).collect()
        assert lifecycle == jobs.topic_lifecycle(log_only).collect()
    finally:
        with_snapshot.unpersist()


def test_replay_reads_the_snapshots_of_a_cleaned_log(spark: Any, tmp_path: Path) -> None:
    """``metaquorum replay`` on a log that does not start at 0 reads its snapshots by default:
    the lifecycle lists the topics of the deleted part, ``--as-of-offset`` before the snapshot
    is refused before any job runs, naming the earliest offset available."""
    batches = history(random.Random(SEED), steps=100)
    ends = [b.end_offset for b in batches]
    directory = tmp_path / "meta" / "__cluster_metadata-0"
    log = SegmentedLog.open(directory, segment_bytes_max=1024)
    log.append(batches)
    log.flush()
    snapshot_end = ends[len(ends) // 2]
    image = replay_batches(
        MetadataImage.EMPTY, [decode_batch(b.data) for b in batches if b.end_offset <= snapshot_end]
    )
    write_snapshot(directory, snapshot_end, 1, image_to_records(image), 0)
    assert log.delete_before(snapshot_end) > 0
    log.close()
    final = replay_batches(MetadataImage.EMPTY, [decode_batch(b.data) for b in batches])

    out, stdout, stderr = tmp_path / "out", io.StringIO(), io.StringIO()
    assert run_replay(tmp_path / "meta", out, stdout=stdout, stderr=stderr) == 0, stderr.getvalue()
    assert "decoding the log and its snapshots" in stdout.getvalue()
    lifecycle = {
        (r["topic_id"], r["name"], r["created_offset"], r["deleted_offset"])
        for r in spark.read.parquet(str(out / "topic_lifecycle")).collect()
    }
    assert lifecycle == lifecycle_of(final)
    state = spark.read.parquet(str(out / "state_as_of")).orderBy("name", "partition")
    rows = [
        tuple(list(v) if isinstance(v, list) else v for v in row)
        for row in state.collect()
        if row["partition"] is not None
    ]
    assert sorted(rows, key=lambda r: (r[1], r[3])) == image_rows(final)
    assert f"Snapshots read (end offsets): {snapshot_end:,}" in (out / "report.md").read_text()

    stderr = io.StringIO()
    code = run_replay(
        tmp_path / "meta", tmp_path / "out2", as_of_offset=1, stdout=io.StringIO(), stderr=stderr
    )
    assert code == 1
    assert f"earliest offset available is {snapshot_end - 1:,}" in stderr.getvalue()
