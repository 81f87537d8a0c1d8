#!/usr/bin/env python3
"""Spark replay throughput against a single-process pure-Python replay of the same log.

How the numbers are taken (wall clock, ``time.perf_counter``; CPU time from ``/proc``, so the
CPU figures need Linux). Other work on the machine moves the wall-clock figures by 20 % or
more, so every run prints the load average around it, and the CPU time per record, which
moves much less (it still rises when both cores are busy: the two tasks, the JVM and the
other processes then share caches):

1. Python baseline, one process: ``quorum.tools.log_dump.iter_frames`` and
   ``decode_log_batch`` (the frame walk and reference decoder ``log dump`` uses, one record
   object per record) feeding a dict-based topic lifecycle (created/deleted offset and time,
   partitions per topic id). Records/s = records in the log / time.
2. The data source's read alone, in this process, one partition after the other:
   ``read_partition`` as an executor runs it (frames, the fields read from the msgpack bytes
   by ``wire_columns``, Arrow batches), without Spark. Wall and CPU time: what one core
   decodes.
3. Spark, ``--master`` (default ``local[2]``): the session is started and the source registered
   before any clock runs, and one warm-up count starts the JVM and the Python workers, then one
   unmeasured noop write compiles the JVM's path from Arrow batches to rows (a count reads no
   column; without it the first measured run was 20-30 % slower). Each figure is one action
   on a fresh ``load()`` (nothing cached, so every action decodes the log again), run
   ``--repeat`` times (default 3) and reported as min / median / max:

   - data source: ``df.write.format("noop")``, every row of every column materialised in the
     JVM, nothing written. Per run also the CPU time per record of the JVM (the Arrow batches
     turned into rows, the tasks, its compilers and garbage collector) and of the Python
     processes under it (the workers that decode: ``read()``);
   - lifecycle job: ``topic_lifecycle(df)`` collected to the driver;
   - state as of offset N: ``state_as_of(df, N)`` counted (the source prunes segments after N;
     the coverage comes from the file listing, so no extra pass).

The Spark settings the runs used (master, cores, memory, JVM options, the source's
``splitBytes`` and the input partitions it planned, and the Python-worker and Arrow settings
that matter here) are printed before the figures; ``--conf KEY=VALUE`` adds a setting and
``--split-bytes`` changes the source's option, to compare them.

Usage::

    .venv/bin/python scripts/bench/gen_synthetic_log.py --out /tmp/mq-10m
    .venv/bin/python scripts/bench/spark_replay.py --log-dir /tmp/mq-10m [--master local[2]]
        [--repeat 3] [--skip-python] [--skip-jobs] [--conf KEY=VALUE ...] [--split-bytes N]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from quorum.analytics.source import (
    SPLIT_BYTES_DEFAULT,
    ReadOptions,
    list_log_files,
    plan_partitions,
    read_partition,
)
from quorum.metadata.batch import decode_log_batch
from quorum.metadata.records import PartitionRecord, RemoveTopicRecord, TopicRecord
from quorum.tools.log_dump import Tail, iter_frames, segment_files

# Settings printed with the figures: the ones a local run of the source depends on.
SHOWN_SETTINGS = (
    "spark.master",
    "spark.driver.memory",
    "spark.driver.extraJavaOptions",
    "spark.executor.extraJavaOptions",
    "spark.python.worker.reuse",
    "spark.sql.execution.arrow.maxRecordsPerBatch",
    "spark.sql.execution.arrow.useLargeVarTypes",
    "spark.sql.shuffle.partitions",
    "spark.default.parallelism",
)

# The JVM flags PySpark itself passes (Java module access, Netty): left out when printed.
_PYSPARK_JVM_FLAGS = (
    "--add-opens",
    "--add-modules",
    "--sun-misc-unsafe-memory-access",
    "--enable-native-access",
    "-XX:+IgnoreUnrecognizedVMOptions",
    "-Djava.net.preferIPv6Addresses",
    "-Dio.netty.",
)


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


class ProcessTreeCpu:
    """CPU seconds of a process (the JVM) and, apart, of every process under it (the Python
    daemon and its workers, with the children they have reaped), read from ``/proc``."""

    def __init__(self, root_pid: int) -> None:
        self.root_pid = root_pid
        self.tick_s = 1 / os.sysconf("SC_CLK_TCK")

    def _stats(self) -> dict[int, tuple[int, float, float]]:
        """pid -> (parent pid, own CPU s, reaped children's CPU s)."""
        stats = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat") as f:
                    text = f.read()
            except OSError:
                continue  # gone meanwhile
            fields = text[text.rindex(")") + 2 :].split()
            own = (int(fields[11]) + int(fields[12])) * self.tick_s  # utime + stime
            reaped = (int(fields[13]) + int(fields[14])) * self.tick_s  # cutime + cstime
            stats[int(name)] = (int(fields[1]), own, reaped)
        return stats

    def sample(self) -> tuple[float, float]:
        """(CPU s of the root, CPU s of its descendants)."""
        stats = self._stats()
        descendants = 0.0
        for pid, (parent, own, reaped) in stats.items():
            ancestor, steps = parent, 0
            while ancestor in stats and ancestor != self.root_pid and steps < 64:
                ancestor, steps = stats[ancestor][0], steps + 1
            if ancestor == self.root_pid and pid != self.root_pid:
                descendants += own + reaped
        return stats[self.root_pid][1], descendants


def load_text() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.1f}/{five:.1f}"


def summary(values: list[float], unit: str, digits: int = 2) -> str:
    """min / median / max."""
    low, middle, high = min(values), statistics.median(values), max(values)
    return f"{low:,.{digits}f} / {middle:,.{digits}f} / {high:,.{digits}f} {unit}"


def timed(label: str, action: Callable[[], Any]) -> tuple[float, Any]:
    print(f"  running: {label} ...", flush=True)
    started = time.perf_counter()
    result = action()
    return time.perf_counter() - started, result


def read_partitions_in_process(log_dir: Path, split_bytes: int) -> tuple[float, float, int]:
    """Every partition read by ``read_partition`` in this process: (wall s, CPU s, rows)."""
    import numpy as np  # noqa: PLC0415
    import pyarrow as pa  # noqa: PLC0415

    pa.array(np.arange(3))  # pyarrow's one-time numpy/pandas set-up (~0.3 s) off the clock
    started, cpu_started = time.perf_counter(), time.process_time()
    rows = 0
    for partition in plan_partitions(ReadOptions(str(log_dir), split_bytes=split_bytes)):
        rows += sum(batch.num_rows for batch in read_partition(partition))
    return time.perf_counter() - started, time.process_time() - cpu_started, rows


def noop_write(spark: Any, log_dir: Path, options: dict[str, Any]) -> None:
    """Every row of every column materialised in the JVM, nothing written."""
    from quorum.analytics.source import load  # noqa: PLC0415

    load(spark, log_dir, **options).write.format("noop").mode("overwrite").save()


def print_settings(spark: Any, log_dir: Path, split_bytes: int) -> None:
    conf = spark.sparkContext.getConf()
    java = spark.sparkContext._jvm.java.lang.System.getProperty("java.version")
    partitions = plan_partitions(ReadOptions(str(log_dir), split_bytes=split_bytes))
    print("Spark settings:")
    print(f"  pyspark {spark.version}, Java {java}, Python {platform.python_version()}")
    print(f"  machine: {os.cpu_count()} CPUs, load average {load_text()} (1/5 min)")
    for key in SHOWN_SETTINGS:
        value = conf.get(key, None) or spark.conf.get(key, None)
        if value is not None and key.endswith("extraJavaOptions"):
            value = " ".join(o for o in value.split() if not o.startswith(_PYSPARK_JVM_FLAGS))
            value = f"{value or '(none)'} (+ the module and Netty flags PySpark adds)"
        print(f"  {key} = {value if value is not None else '(default)'}")
    print(
        f"  source: splitBytes = {split_bytes:,} -> {len(partitions)} input partitions "
        "(Spark tasks)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log-dir", type=Path, required=True)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--as-of", type=int, default=None, help="default: the middle offset")
    parser.add_argument("--skip-python", action="store_true", help="skip the Python baselines")
    parser.add_argument("--skip-jobs", action="store_true", help="data source figures only")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each Spark action")
    parser.add_argument("--split-bytes", type=int, default=SPLIT_BYTES_DEFAULT)
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting"
    )
    args = parser.parse_args(argv)
    extra_conf = dict(item.split("=", 1) for item in args.conf)

    segments, _ = list_log_files(args.log_dir)
    size_mb = sum(s.size_bytes for s in segments) / 1e6
    print(f"log: {args.log_dir} ({len(segments)} segments, {size_mb:,.1f} MB)")
    rows: list[tuple[str, str]] = []

    if not args.skip_python:
        seconds, (records, topics) = timed(
            "Python replay (reference decoder)", lambda: python_lifecycle(args.log_dir)
        )
        rows.append(("Python, 1 process: lifecycle via decode_log_batch", rate(records, seconds)))
        print(f"  Python lifecycle: {len(topics):,} topic ids, load {load_text()}")
        walls, cpus = [], []
        for run in range(args.repeat):
            wall, cpu, decoded = read_partitions_in_process(args.log_dir, args.split_bytes)
            walls.append(decoded / wall / 1e6)
            cpus.append(cpu / decoded * 1e6)
            print(
                f"  read_partition, run {run + 1}: {decoded:,} records, {wall:.1f} s, "
                f"{cpus[-1]:.2f} us CPU/record, load {load_text()}",
                flush=True,
            )
        rows.append(("Python, 1 process: read_partition (no Spark)", summary(walls, "M/s")))
        rows.append(("... its CPU per record", summary(cpus, "us")))

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from quorum.analytics.jobs import Coverage, state_as_of, topic_lifecycle  # noqa: PLC0415
    from quorum.analytics.replay import build_session  # noqa: PLC0415
    from quorum.analytics.source import load  # noqa: PLC0415

    started = time.perf_counter()
    spark = build_session(args.master, app_name="metaquorum-bench", conf=extra_conf)
    print(f"  Spark session ({args.master}) started in {time.perf_counter() - started:.1f} s")
    cpu = ProcessTreeCpu(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    options = {"splitBytes": args.split_bytes}
    try:
        print_settings(spark, args.log_dir, args.split_bytes)
        seconds, records = timed(
            "Spark warm-up count", lambda: load(spark, args.log_dir, **options).count()
        )
        print(f"  warm-up count: {records:,} records in {seconds:.1f} s (JVM + workers start)")
        # A count materialises no column: one unmeasured pass of the measured action compiles
        # the JVM's path from Arrow batches to rows before the clock runs.
        seconds, _ = timed("Spark warm-up write", lambda: noop_write(spark, args.log_dir, options))
        print(f"  warm-up write: {seconds:.1f} s (the columns' path compiled)")
        rates, jvm_us, python_us = [], [], []
        for run in range(args.repeat):
            jvm_before, python_before = cpu.sample()
            load_before = load_text()
            seconds, _ = timed(
                f"data source (noop write), run {run + 1} of {args.repeat}",
                lambda: noop_write(spark, args.log_dir, options),
            )
            jvm_after, python_after = cpu.sample()
            rates.append(records / seconds / 1e6)
            jvm_us.append((jvm_after - jvm_before) / records * 1e6)
            python_us.append((python_after - python_before) / records * 1e6)
            print(
                f"    {seconds:.1f} s = {rates[-1]:.2f} M records/s; CPU per record: JVM "
                f"{jvm_us[-1]:.2f} us, Python workers {python_us[-1]:.2f} us; load "
                f"{load_before} -> {load_text()}",
                flush=True,
            )
        rows.append((f"Spark {args.master}: data source, every column", summary(rates, "M/s")))
        rows.append(("... JVM CPU per record", summary(jvm_us, "us")))
        rows.append(("... Python workers' CPU per record", summary(python_us, "us")))
        total_us = [j + p for j, p in zip(jvm_us, python_us, strict=True)]
        rows.append(("... both", summary(total_us, "us")))
        if not args.skip_jobs:
            seconds, lifecycle = timed(
                "lifecycle job",
                lambda: topic_lifecycle(load(spark, args.log_dir, **options)).collect(),
            )
            print(f"  Spark lifecycle: {len(lifecycle):,} topic ids")
            rows.append((f"Spark {args.master}: topic_lifecycle", rate(records, seconds)))
            as_of = records // 2 if args.as_of is None else args.as_of
            coverage = Coverage.of_listing(args.log_dir, endOffset=as_of + 1)
            seconds, state = timed(
                f"state as of {as_of}",
                lambda: state_as_of(
                    load(spark, args.log_dir, endOffset=as_of + 1, **options), as_of, coverage
                ).count(),
            )
            rows.append((f"Spark {args.master}: state_as_of({as_of:,})", rate(as_of + 1, seconds)))
            print(f"  state as of {as_of:,}: {state:,} (topic, partition) rows")
    finally:
        spark.stop()
    print()
    print(f"| {'what':58} | {'min / median / max':>32} |")
    print(f"| {'-' * 58} | {'-' * 31}: |")
    for label, value in rows:
        print(f"| {label:58} | {value:>32} |")
    print(
        "\nWall clock per action unless marked CPU; Spark figures exclude session start and the "
        "warm-ups; M/s = million records decoded per second (for state_as_of: the records "
        "up to the offset)."
    )
    return 0


def rate(records: int, seconds: float) -> str:
    return f"{seconds:.1f} s = {records / seconds / 1e6:.2f} M/s"


if __name__ == "__main__":
    sys.exit(main())
