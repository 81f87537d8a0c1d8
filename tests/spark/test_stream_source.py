"""``spark.readStream.format("metaquorum")`` in a Spark session: the rows equal the batch
source's, ``Trigger.AvailableNow`` reads everything there was when the query started and ends,
and bad options or a schema are refused with what is allowed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from quorum.analytics.source import MetaquorumDataSource, load
from quorum.metadata.batch import encode_batch
from quorum.metadata.records import NoOpRecord
from quorum.storage import SegmentedLog


def write_log(directory: Path, batches: int) -> int:
    with SegmentedLog.open(directory / "__cluster_metadata-0", segment_bytes_max=1024) as log:
        for n in range(batches):
            offset = log.log_end_offset
            log.append(
                [
                    encode_batch(
                        base_offset=offset,
                        epoch=1 + n // 10,
                        timestamp_ms=1_700_000_000_000 + offset,
                        records=[NoOpRecord()] * (1 + n % 4),
                        control=False,
                    )
                ]
            )
        return log.log_end_offset


def test_available_now_reads_what_there_was_and_ends(spark: Any, tmp_path: Path) -> None:
    end = write_log(tmp_path, 40)
    spark.dataSource.register(MetaquorumDataSource)
    query = (
        spark.readStream.format("metaquorum")
        .option("splitBytes", "256")  # several partitions per micro-batch
        .load(str(tmp_path))
        .writeStream.format("memory")
        .queryName("available_now")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert not query.isActive, "a Trigger.AvailableNow query did not end"
    assert query.exception() is None, query.exception()
    streamed = spark.sql("SELECT * FROM available_now ORDER BY offset").collect()
    batch = load(spark, tmp_path).orderBy("offset").collect()
    assert [r["offset"] for r in streamed] == list(range(end))
    assert streamed == batch


def test_options_and_schema_are_refused(spark: Any, tmp_path: Path) -> None:
    write_log(tmp_path, 2)
    spark.dataSource.register(MetaquorumDataSource)
    bad = spark.readStream.format("metaquorum").option("startOffset", "3").load(str(tmp_path))
    query = bad.writeStream.format("memory").queryName("bad_option").start()
    with pytest.raises(Exception, match="unknown option"):
        query.awaitTermination(120)
    typed = spark.readStream.format("metaquorum").schema("offset BIGINT").load(str(tmp_path))
    query = typed.writeStream.format("memory").queryName("bad_schema").start()
    with pytest.raises(Exception, match="has a fixed schema"):
        query.awaitTermination(120)
