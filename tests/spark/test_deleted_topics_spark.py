"""Spark agrees with the image on deleted topics (docs/architecture.md#deleted-topic-ids): a
snapshot holds the deletions its image retained (the newest ``retained_max``), and
``topic_lifecycle`` over that snapshot plus the log after it lists every id the image still
knows, with the image's offsets."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from quorum.analytics import jobs
from quorum.analytics.source import load
from quorum.metadata.batch import LogBatch, encode_batch
from quorum.metadata.image import MetadataImage
from quorum.metadata.snapshot_records import image_to_records
from quorum.storage import SegmentedLog
from quorum.storage.snapshots import write_snapshot
from tests.unit.controller.test_deleted_topics import churn, replay

RETAINED_MAX = 4


def lifecycle_of(image: MetadataImage) -> set[tuple[str, str, int, int | None]]:
    alive = {
        (str(t.topic_id), t.name, t.creation_offset, None) for t in image.topics_by_id.values()
    }
    gone = {
        (str(d.topic_id), d.name, d.creation_offset, d.deletion_offset)
        for d in image.deleted_topics.values()
    }
    return alive | gone


def test_lifecycle_over_a_snapshot_that_forgot_deletions(spark: Any, tmp_path: Path) -> None:
    entries = churn(random.Random(11), 40)
    records = [record for _, record in entries]
    batches: list[LogBatch] = []
    for start in range(0, len(records), 6):
        batches.append(
            encode_batch(
                base_offset=start,
                epoch=1,
                timestamp_ms=1_000 + start,
                records=records[start : start + 6],
            )
        )
    directory = tmp_path / "__cluster_metadata-0"
    log = SegmentedLog.open(directory, segment_bytes_max=1024)
    log.append(batches)
    log.flush()
    end = batches[len(batches) // 2].end_offset
    at_snapshot = replay(MetadataImage.EMPTY, entries[:end], RETAINED_MAX)
    assert at_snapshot.offset == end - 1 and len(at_snapshot.deleted_topics) == RETAINED_MAX
    write_snapshot(directory, end, 1, image_to_records(at_snapshot), 1_000 + end)
    log_start = log.delete_before(end)
    log.close()
    assert 0 < log_start <= end
    final = replay(MetadataImage.EMPTY, entries, RETAINED_MAX)

    df = load(spark, directory, includeSnapshots=True).cache()
    try:
        in_snapshot = {
            r["topic_id"] for r in df.filter("record_type = 'DeletedTopicRecord'").collect()
        }
        assert in_snapshot == {str(i) for i in at_snapshot.deleted_topics}
        lifecycle = {
            (r["topic_id"], r["name"], r["created_offset"], r["deleted_offset"])
            for r in jobs.topic_lifecycle(df).collect()
        }
    finally:
        df.unpersist()
    # Every id the image knows is listed with the image's offsets; Spark may list more (the
    # deletions of the log rows read, which the image forgot since).
    assert lifecycle_of(final) < lifecycle, "the log after the snapshot deletes more than 4"
    known = {row[0] for row in lifecycle_of(final)}
    assert all(row in lifecycle_of(final) for row in lifecycle if row[0] in known)
