#!/usr/bin/env python3
"""Spark replay throughput against a single-process pure-Python replay of the same log.

How the numbers are taken (wall clock, ``time.perf_counter``, and CPU time of this process,
``time.process_time``; run it on a quiet machine, the figures move by 20 % or more when other
work shares the two cores):

1. Python baseline, one process: ``quorum.tools.log_dump.iter_frames`` and
   ``decode_log_batch`` (the frame walk and reference decoder ``log dump`` uses, one record
   object per record) feeding a dict-based topic lifecycle (created/deleted offset and time,
   partitions per topic id). Records/s = records in the log / time.
2. The data source's read alone, in this process, one partition (segment) after the other:
   ``read_partition`` as an executor runs it (frames, typed decoding, Arrow batches), without
   Spark. Printed per partition and in total, wall and CPU: what one core decodes.
3. Spark, ``--master`` (default ``local[2]``): the session is started and the source registered
   before any clock runs. Each figure is one action on a fresh ``load()`` (nothing cached, so
   every action decodes the log again); ``--repeat N`` runs the data-source action N times and
   reports each run and the best:

   - data source: ``df.write.format("noop")`` -- every row of every column materialised in the
     JVM, nothing written;
   - lifecycle job: ``topic_lifecycle(df)`` collected to the driver;
   - state as of offset N: ``state_as_of(df, N)`` counted (the source prunes segments after N;
     the coverage comes from the file listing, so no extra pass).

Usage::

    .venv/bin/python scripts/bench/gen_synthetic_log.py --out /tmp/mq-10m
    .venv/bin/python scripts/bench/spark_replay.py --log-dir /tmp/mq-10m [--master local[2]]
        [--repeat 3] [--skip-python] [--skip-jobs]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from quorum.analytics.source import (
    ReadOptions,
    list_log_files,
    plan_partitions,
    read_partition,
)
from quorum.metadata.batch import decode_log_batch
from quorum.metadata.records import PartitionRecord, RemoveTopicRecord, TopicRecord
from quorum.tools.log_dump import Tail, iter_frames, segment_files


def python_lifecycle(log_dir: Path) -> tuple[int, dict[Any, list[Any]]]:
    """The topic lifecycle job in one process, the way a script would write it: the frame walk
    of ``log dump`` and the reference decoder, then dicts."""
    topics: dict[Any, list[Any]] = {}  # id -> [name, created, created_ms, deleted, deleted_ms]
    partitions: dict[Any, set[int]] = {}
    records = 0
    for item in iter_frames(segment_files(log_dir)):
        if isinstance(item, Tail):
            break
        batch = decode_log_batch(item.batch)
        records += len(batch.records)
        for offset, record in enumerate(batch.records, start=batch.base_offset):
            if isinstance(record, PartitionRecord):
                partitions.setdefault(record.topic_id, set()).add(record.partition)
            elif isinstance(record, TopicRecord):
                topics[record.topic_id] = [record.name, offset, batch.timestamp_ms, None, None]
            elif isinstance(record, RemoveTopicRecord) and record.topic_id in topics:
                topics[record.topic_id][3:5] = [offset, batch.timestamp_ms]
    for topic_id, entry in topics.items():
        entry.append(len(partitions.get(topic_id, ())))
    return records, topics


def timed(label: str, action: Any) -> tuple[float, Any]:
    print(f"  running: {label} ...", flush=True)
    started = time.perf_counter()
    result = action()
    return time.perf_counter() - started, result


def read_partitions_in_process(log_dir: Path) -> list[tuple[str, float, float, int]]:
    """Each partition read by ``read_partition`` in this process: (file, wall s, CPU s, rows)."""
    import numpy as np  # noqa: PLC0415
    import pyarrow as pa  # noqa: PLC0415

    pa.array(np.arange(3))  # pyarrow's one-time numpy/pandas set-up (~0.3 s) off the clock
    results = []
    for partition in plan_partitions(ReadOptions(str(log_dir))):
        started, cpu_started = time.perf_counter(), time.process_time()
        rows = sum(batch.num_rows for batch in read_partition(partition))
        wall = time.perf_counter() - started
        cpu = time.process_time() - cpu_started
        results.append((Path(partition.file.path).name, wall, cpu, rows))
        print(
            f"  read_partition {results[-1][0]}: {rows:,} records, {wall:.2f} s "
            f"({rows / wall:,.0f}/s wall, {rows / cpu:,.0f}/s CPU)",
            flush=True,
        )
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log-dir", type=Path, required=True)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--as-of", type=int, default=None, help="default: the middle offset")
    parser.add_argument("--skip-python", action="store_true", help="skip the Python baseline")
    parser.add_argument("--skip-jobs", action="store_true", help="data source figures only")
    parser.add_argument("--repeat", type=int, default=1, help="runs of the data-source action")
    args = parser.parse_args(argv)

    segments, _ = list_log_files(args.log_dir)
    size_mb = sum(s.size_bytes for s in segments) / 1e6
    print(f"log: {args.log_dir} ({len(segments)} segments, {size_mb:,.1f} MB)")
    rows: list[tuple[str, float, int]] = []

    if not args.skip_python:
        seconds, (records, topics) = timed(
            "Python replay (reference decoder)", lambda: python_lifecycle(args.log_dir)
        )
        rows.append(("Python, 1 process: lifecycle via decode_log_batch", seconds, records))
        print(f"  Python lifecycle: {len(topics):,} topic ids")
    print("  running: the source's read_partition in this process, partition by partition")
    per_partition = read_partitions_in_process(args.log_dir)
    decoded = sum(r[3] for r in per_partition)
    wall = sum(r[1] for r in per_partition)
    cpu = sum(r[2] for r in per_partition)
    rows.append(("Python, 1 process: read_partition, wall (no Spark)", wall, decoded))
    rows.append(("Python, 1 process: read_partition, CPU time", cpu, decoded))

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from quorum.analytics.jobs import Coverage, state_as_of, topic_lifecycle  # noqa: PLC0415
    from quorum.analytics.replay import build_session  # noqa: PLC0415
    from quorum.analytics.source import load  # noqa: PLC0415

    started = time.perf_counter()
    spark = build_session(args.master, app_name="metaquorum-bench")
    print(f"  Spark session ({args.master}) started in {time.perf_counter() - started:.1f} s")
    try:
        seconds, records = timed("Spark warm-up count", lambda: load(spark, args.log_dir).count())
        print(f"  warm-up count: {records:,} records in {seconds:.1f} s (JVM + workers start)")
        runs = []
        for run in range(args.repeat):
            seconds, _ = timed(
                f"data source (noop write), run {run + 1} of {args.repeat}",
                lambda: load(spark, args.log_dir).write.format("noop").mode("overwrite").save(),
            )
            runs.append(seconds)
            print(f"    {seconds:.1f} s = {records / seconds:,.0f} records/s", flush=True)
        rows.append((f"Spark {args.master}: data source, all columns (best)", min(runs), records))
        if args.skip_jobs:
            return _print_rows(rows)
        seconds, lifecycle = timed(
            "lifecycle job", lambda: topic_lifecycle(load(spark, args.log_dir)).collect()
        )
        rows.append((f"Spark {args.master}: topic_lifecycle", seconds, records))
        print(f"  Spark lifecycle: {len(lifecycle):,} topic ids")
        as_of = records // 2 if args.as_of is None else args.as_of
        coverage = Coverage.of_listing(args.log_dir, endOffset=as_of + 1)
        seconds, state = timed(
            f"state as of {as_of}",
            lambda: state_as_of(
                load(spark, args.log_dir, endOffset=as_of + 1), as_of, coverage
            ).count(),
        )
        rows.append((f"Spark {args.master}: state_as_of({as_of:,})", seconds, as_of + 1))
        print(f"  state as of {as_of:,}: {state:,} (topic, partition) rows")
    finally:
        spark.stop()
    return _print_rows(rows)


def _print_rows(rows: list[tuple[str, float, int]]) -> int:
    print()
    print(f"| {'what':60} | {'seconds':>8} | {'records':>12} | {'records/s':>12} |")
    print(f"| {'-' * 60} | {'-' * 8}: | {'-' * 12}: | {'-' * 12}: |")
    for label, seconds, count in rows:
        print(f"| {label:60} | {seconds:8.1f} | {count:12,} | {count / seconds:12,.0f} |")
    print(
        "\nWall clock per action unless marked CPU; Spark figures exclude session start and the "
        "warm-up count; records/s = records decoded / seconds (for state_as_of: the records up "
        "to the offset)."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
