#!/usr/bin/env python3
"""Does the streaming source keep up with a live metadata log, and how far behind is it?

A writer thread appends to a real metadata log (``quorum.storage.SegmentedLog``: CRC32C frames,
offset index, segment rolls, an fsync after every batch, as a controller's durable append) at
``--rate`` records/s (default 1,000), in ``--batches-per-second`` batches (default 10): each a
topic creation (``TopicRecord``, ``PartitionRecord``s with replication factor 3, a
``ConfigRecord``), timed by the wall clock after its fsync. Meanwhile the query ``metaquorum
replay --follow`` runs (``readStream.format("metaquorum")`` on that directory, Spark's Parquet
file sink with a checkpoint, a processing-time trigger of ``--trigger-interval`` seconds,
``--master`` default ``local[2]``) is measured for ``--seconds`` (default 60), from
``--warmup`` seconds (default 15) after its first micro-batch (which starts the Python workers
and the JVM's compilers while the writer goes on), and the bench polls ``query.lastProgress``
every 20 ms. Beside the query, the analytics tables are refreshed as ``replay --follow``
refreshes them (every ``--refresh-interval`` seconds, default 30; ``--no-tables``: not at all),
competing with the stream for the same cores.

End-to-end lag of a micro-batch: from the moment the first batch it covers was durable in the
log (so the record that waited longest) to the moment the bench saw the micro-batch committed
(its Parquet files written and listed in ``_spark_metadata``, its offsets in the checkpoint's
``commits/``): what a reader of the table waits for a record. Printed: the records/s written
and committed, the lag per micro-batch (min / median / p95 / max), and how long after the
writer stopped the table held its last record. "Keeps up": the committed rate equals the
written rate and the lag stays bounded (no growing backlog).

Usage::

    .venv/bin/python scripts/bench/spark_stream.py [--rate 1000] [--seconds 60]
        [--warmup 15] [--trigger-interval 1] [--master local[2]]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from bisect import bisect_right
from pathlib import Path
from typing import Any

from quorum.analytics.follow_tables import TableRefresher, prepare_out
from quorum.analytics.replay import build_session
from quorum.analytics.source import MetaquorumDataSource
from quorum.analytics.stream import checkpointed_offset
from quorum.ids import Uuid
from quorum.metadata.batch import encode_batch
from quorum.metadata.records import ConfigRecord, ConfigResourceType, PartitionRecord, TopicRecord
from quorum.storage import SegmentedLog

POLL_S = 0.02


class Writer(threading.Thread):
    """Appends topic creations at a steady rate; remembers when each batch was durable."""

    def __init__(self, directory: Path, rate: int, batches_per_second: int) -> None:
        super().__init__(daemon=True)
        self.log = SegmentedLog.open(directory, segment_bytes_max=8 * 1024 * 1024)
        self.records_per_batch = max(3, rate // batches_per_second)
        self.interval_s = 1.0 / batches_per_second
        self.bases: list[int] = []  # base offset of each batch
        self.durable_at: list[float] = []  # perf_counter after its fsync
        self.stop_requested = threading.Event()
        self.n = 0
        self.behind_s = 0.0  # the most the writer fell behind its schedule

    def batch(self) -> list[Any]:
        topic_id = Uuid.random()
        partitions = self.records_per_batch - 2
        name = f"bench-{self.n}"
        self.n += 1
        return [
            TopicRecord(name, topic_id),
            *(
                PartitionRecord(topic_id, p, (1, 2, 3), (1, 2, 3), 1 + p % 3)
                for p in range(partitions)
            ),
            ConfigRecord(ConfigResourceType.TOPIC, name, "retention.ms", "86400000"),
        ]

    def run(self) -> None:
        next_at = time.perf_counter()
        while not self.stop_requested.is_set():
            offset = self.log.log_end_offset
            records = self.batch()
            self.log.append(
                [
                    encode_batch(
                        base_offset=offset,
                        epoch=1,
                        timestamp_ms=int(time.time() * 1000),
                        records=records,
                        control=False,
                    )
                ]
            )
            self.log.flush()
            now = time.perf_counter()
            self.bases.append(offset)
            self.durable_at.append(now)
            next_at += self.interval_s
            self.behind_s = max(self.behind_s, now - next_at)
            self.stop_requested.wait(max(0.0, next_at - time.perf_counter()))
        self.log.close()

    def durable_time(self, offset: int) -> float:
        return self.durable_at[bisect_right(self.bases, offset) - 1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=1000, help="records/s written")
    parser.add_argument("--batches-per-second", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=60.0, help="measured duration")
    parser.add_argument("--trigger-interval", type=float, default=1.0)
    parser.add_argument(
        "--warmup",
        type=float,
        default=15.0,
        help="seconds after the first micro-batch not measured",
    )
    parser.add_argument("--master", default="local[2]")
    parser.add_argument(
        "--refresh-interval",
        type=float,
        default=30.0,
        help="seconds between refreshes of the analytics tables beside the stream, as replay "
        "--follow runs them (quorum.analytics.follow_tables)",
    )
    parser.add_argument(
        "--no-tables", dest="tables", action="store_false", help="the records table only"
    )
    args = parser.parse_args(argv)

    root = Path(tempfile.mkdtemp(prefix="mq-stream-bench-"))
    try:
        return run(root, args)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run(root: Path, args: argparse.Namespace) -> int:
    directory = root / "__cluster_metadata-0"
    spark = build_session(args.master, "metaquorum-stream-bench", jvm_log=root / "spark.log")
    spark.dataSource.register(MetaquorumDataSource)
    writer = Writer(directory, args.rate, args.batches_per_second)
    writer.start()
    writer_started = time.perf_counter()
    query = (
        spark.readStream.format("metaquorum")
        .load(str(directory))
        .writeStream.format("parquet")
        .option("path", str(root / "records"))
        .option("checkpointLocation", str(root / "checkpoint"))
        .trigger(processingTime=f"{args.trigger_interval} seconds")
        .start()
    )
    refresher = None
    if args.tables:
        prepare_out(root)
        refresher = TableRefresher(
            spark,
            root,
            directory,
            functools.partial(checkpointed_offset, root / "checkpoint"),
            caught_up=lambda: query.lastProgress is not None,
            interval_s=args.refresh_interval,
            stdout=sys.stdout,
        )
        refresher.start()
    lags: list[float] = []
    warmup_lags: list[float] = []
    committed = 0
    seen = -1
    measure_from: float | None = None
    records_measured = 0
    stop_at: float | None = None
    caught_up_after: float | None = None
    written_end = 0
    try:
        while True:
            time.sleep(POLL_S)
            now = time.perf_counter()
            if query.exception() is not None:
                print(f"the query failed: {query.exception()}", file=sys.stderr)
                return 1
            progress = query.lastProgress
            if progress is not None and progress["batchId"] != seen:
                seen = progress["batchId"]
                source = progress["sources"][0]
                if progress["numInputRows"]:
                    start = (json.loads(source["startOffset"] or "null") or {"offset": 0})["offset"]
                    committed = json.loads(source["endOffset"])["offset"]
                    lag = now - writer.durable_time(start)
                    if measure_from is None:
                        # The first micro-batch starts the Python workers and the JVM's
                        # compilers; the warm-up after it lets the backlog they left drain.
                        measure_from = now + args.warmup
                    if now >= measure_from:
                        lags.append(lag)
                        records_measured += progress["numInputRows"]
                    else:
                        warmup_lags.append(lag)
            if measure_from is not None and stop_at is None and now - measure_from >= args.seconds:
                writer.stop_requested.set()
                writer.join()
                stop_at = time.perf_counter()
                written_end = writer.log.log_end_offset
            if stop_at is not None and committed >= written_end:
                caught_up_after = now - stop_at
                break
            if stop_at is not None and now - stop_at > 60:
                break
    finally:
        if refresher is not None:
            refresher.stop()
        query.stop()
        writer.stop_requested.set()
        spark.stop()
    elapsed = (stop_at or time.perf_counter()) - (measure_from or writer_started)
    load = os.getloadavg()
    print(f"master {args.master}, trigger {args.trigger_interval} s, {os.cpu_count()} cores")
    print(
        f"written: {written_end:,} records in {len(writer.bases):,} batches "
        f"({writer.records_per_batch} records each), target {args.rate:,} records/s, "
        f"the writer at most {writer.behind_s * 1000:.0f} ms behind its schedule"
    )
    print(
        f"committed while measured: {records_measured:,} records in {elapsed:.1f} s "
        f"({records_measured / elapsed:,.0f} records/s) over {len(lags)} micro-batches"
    )
    if warmup_lags:
        print(
            f"warm-up ({args.warmup:.0f} s after the first micro-batch, not measured): "
            f"{len(warmup_lags)} micro-batches, lag max {max(warmup_lags):.2f} s"
        )
    if lags:
        ordered = sorted(lags)
        p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
        print(
            f"end-to-end lag per micro-batch: min {ordered[0]:.2f} s, median "
            f"{statistics.median(ordered):.2f} s, p95 {p95:.2f} s, max {ordered[-1]:.2f} s"
        )
    if caught_up_after is None:
        print("the table did NOT hold the last record within 60 s of the writer stopping")
        return 1
    print(f"last record in the table {caught_up_after:.2f} s after the writer stopped")
    if refresher is not None:
        tables = refresher.published
        print(
            f"tables (refreshed every {args.refresh_interval:.0f} s at most, never sooner than "
            f"the last refresh took): {refresher.refreshes} refreshes, "
            + (
                "none published"
                if tables is None
                else f"the last of {tables.records:,} records in {tables.seconds:.1f} s"
            )
        )
        if refresher.error is not None:
            print(f"a refresh failed: {refresher.error}")
            return 1
    print(f"load average (1, 5, 15 min) at the end: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    return 0 if lags and max(lags) < 5.0 else 1


if __name__ == "__main__":
    sys.exit(main())
