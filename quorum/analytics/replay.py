"""``metaquorum replay``: every replay job over a metadata log, as Parquet plus a report.

Local (the default master is ``local[*]``)::

    metaquorum replay --log-dir .data/controller-1 --out replay-out [--as-of-offset N]

On any Spark master with ``spark-submit``: the executors need Python with this project's
``quorum`` package and the libraries its data source imports (msgpack, msgspec, crc32c,
structlog, pyarrow, numpy). ``metaquorum spark pack-env`` packs exactly those from this
installation into one archive that travels with the job (quorum/analytics/pack.py: every
worker needs the same Python at the same path; the driver, in client mode, needs ``./env``
where spark-submit runs, e.g. a symlink to its own virtualenv). The log directory must be
visible under the same path to the driver and every worker (listing happens on the driver,
reading on the workers: a shared file system)::

    metaquorum spark pack-env --out /tmp/metaquorum-env.tar.gz
    ln -s "$VIRTUAL_ENV" env
    PYSPARK_DRIVER_PYTHON=python spark-submit --master spark://host:7077 \\
        --archives /tmp/metaquorum-env.tar.gz#env \\
        --conf spark.pyspark.python=./env/bin/python \\
        /path/to/metaquorum/quorum/analytics/replay.py \\
        --log-dir /shared/controller-1 --out /shared/replay-out

Under ``spark-submit`` no master is set here (``--master`` of spark-submit wins) and the
loopback settings for local runs are not applied.

Outputs in ``--out``: one Parquet directory per job (``topic_lifecycle/``, ``name_reuse/``,
``partitions_per_broker_over_time/``, ``leadership_timeline/``, ``broker_events/``,
``state_as_of/``, ``voters_as_of/``), ``report.md`` and its PNG plots. The decoded log is
persisted once (memory, then disk) and every job runs on it.

Snapshots. By default (``include_snapshots=None``, no flag) the ``.checkpoint`` files are read
too exactly when the log does not start at offset 0: a controller deletes the segments before
its newest snapshot, and the history before the log start is then only in snapshots. A log
that starts at 0 holds all of it, and its snapshots would only add decoding.
``--include-snapshots`` / ``--no-include-snapshots`` force either way. With snapshots the
lifecycle and name-reuse tables also list the topics created (or created and deleted) before
the log start, from the snapshots' creation and deletion offsets; ``state_as_of`` starts from
the newest snapshot at or before the offset (``quorum.analytics.jobs``). An ``--as-of-offset``
whose state the files do not determine (before the oldest snapshot, or in a deleted stretch of
the log) is an error naming the offsets that are available, reported before any job runs.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["build_session", "main", "run_replay"]

# Offsets per broker kept for the partitions-per-broker plot (the job's output itself is full).
_PLOT_BUCKETS = 400
_NAME_REUSE_ROWS_PRINTED = 20
# Where a local run puts the JVM's output (under --out), unless --verbose.
SPARK_LOG = "spark.log"


@contextmanager
def _stderr_to(path: Path | None) -> Iterator[None]:
    """While the JVM starts, file descriptor 2 points at ``path`` (None: left alone). The JVM
    (and the Python workers it forks) keep writing their stderr there for their lifetime:
    the JVM's warnings, log4j's start-up lines, Spark's WARN logs. Python's own stderr is back
    on the terminal as soon as the block ends."""
    if path is None:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(log, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(log)


def build_session(
    master: str | None = "local[*]",
    app_name: str = "metaquorum-replay",
    *,
    jvm_log: Path | None = None,
    conf: Mapping[str, str] | None = None,
) -> Any:
    """A Spark session on ``master`` (None: whatever ``spark-submit`` set). Local masters bind
    to loopback only, run the Python workers with this interpreter and get a 4 GiB heap
    (``SPARK_DRIVER_MEMORY`` overrides it). ``jvm_log``: a file that gets the JVM's and Spark's
    own output (the start-up chatter of Spark and Py4J) instead of the terminal. ``conf``: more
    settings, applied last (benchmarks)."""
    # spark-submit hands the Python driver a running JVM through PYSPARK_GATEWAY_PORT.
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    local = master.startswith("local") if master is not None else not submitted
    if local:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession  # noqa: PLC0415 - pyspark only when replaying

    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
        if local:
            builder = (
                builder.config("spark.driver.host", "127.0.0.1")
                .config("spark.driver.bindAddress", "127.0.0.1")
                .config("spark.ui.enabled", "false")
                # In local mode the driver's heap is the executors' too. Spark's default of 1 GiB
                # makes the JVM collect garbage most of the time once two tasks stream Arrow
                # batches into it (a 10 M-record read took 17-35 s instead of 11-13 s).
                .config("spark.driver.memory", os.environ.get("SPARK_DRIVER_MEMORY", "4g"))
            )
    builder = builder.config("spark.sql.session.timeZone", "UTC").config(
        "spark.ui.showConsoleProgress", "false"
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    with _stderr_to(jvm_log if not submitted else None):
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


class _Progress:
    """Prints each stage as it starts and how long it took: ``[3/10] topic_lifecycle ... 2.1 s``."""

    def __init__(self, total: int, out: TextIO) -> None:
        self.total = total
        self.done = 0
        self.out = out
        self.seconds: list[tuple[str, float]] = []

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        self.done += 1
        print(f"[{self.done}/{self.total}] {name} ...", end="", flush=True, file=self.out)
        started = time.perf_counter()
        yield
        elapsed = time.perf_counter() - started
        self.seconds.append((name, elapsed))
        print(f" {elapsed:.1f} s", flush=True, file=self.out)


def run_replay(
    log_dir: str | Path,
    out: str | Path,
    master: str | None = "local[*]",
    as_of_offset: int | None = None,
    *,
    include_snapshots: bool | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    verbose: bool = False,
) -> int:
    """Replay the log in ``log_dir`` (a ``metadata.log.dir`` or its ``__cluster_metadata-0``)
    into ``out``; ``as_of_offset`` (default: the last offset) for ``state_as_of``;
    ``include_snapshots`` None: read the snapshots iff the log does not start at offset 0 (see
    the module docstring). Prints the stages and the name-reuse table. Returns the exit code:
    0, or 1 with a message on stderr. The JVM's own output (Spark's and Py4J's start-up lines,
    its warnings) goes to ``OUT/spark.log`` unless ``verbose``."""
    from pyspark.errors import PySparkException  # noqa: PLC0415

    from quorum.analytics.jobs import StateNotAvailableError  # noqa: PLC0415
    from quorum.analytics.source import LogReadError, list_log_files  # noqa: PLC0415

    out_stream = stdout or sys.stdout
    err_stream = stderr or sys.stderr
    if as_of_offset is not None and as_of_offset < 0:
        print(f"Error: --as-of-offset must be >= 0, got {as_of_offset}", file=err_stream)
        return 1
    try:
        segments, checkpoints = list_log_files(log_dir)
    except LogReadError as exc:
        print(f"Error: {exc}", file=err_stream)
        return 1
    if include_snapshots is None:
        include_snapshots = not segments or segments[0].base_offset > 0
    if not segments and not (include_snapshots and checkpoints):
        print(f"Error: no log segments (NNNN.log) under {log_dir}", file=err_stream)
        return 1
    out_path = Path(out)
    out_path.mkdir(parents=True, exist_ok=True)
    from quorum.analytics.jobs import JOBS  # noqa: PLC0415

    # Spark, decoding, each job, state_as_of, acls_as_of, voters_as_of, the report.
    progress = _Progress(total=len(JOBS) + 6, out=out_stream)
    try:
        with progress.stage(f"starting Spark ({master or 'from spark-submit'})"):
            from pyspark.sql import SparkSession  # noqa: PLC0415

            # Inside a program that already has a session (tests, a notebook): use it, leave it.
            existing = SparkSession.getActiveSession()
            jvm_log = None if verbose else out_path / SPARK_LOG
            spark = existing if existing is not None else build_session(master, jvm_log=jvm_log)
        try:
            _replay(
                spark,
                Path(log_dir),
                out_path,
                as_of_offset=as_of_offset,
                include_snapshots=include_snapshots,
                progress=progress,
                stdout=out_stream,
            )
        finally:
            if existing is None:
                spark.stop()
    except (LogReadError, PySparkException, StateNotAvailableError) as exc:
        print(file=out_stream)
        print(f"Error: {_first_lines(str(exc))}", file=err_stream)
        if not verbose and (out_path / SPARK_LOG).exists():
            print(f"Spark's own log: {out_path / SPARK_LOG}", file=err_stream)
        return 1
    return 0


def _first_lines(text: str, lines: int = 12) -> str:
    """A Spark error with its (long) JVM stack trace cut: the Python error is at the top."""
    kept = text.strip().splitlines()
    return "\n".join(kept[:lines] + (["..."] if len(kept) > lines else []))


def _replay(
    spark: SparkSession,
    log_dir: Path,
    out: Path,
    *,
    as_of_offset: int | None,
    include_snapshots: bool,
    progress: _Progress,
    stdout: TextIO,
) -> None:
    from pyspark import StorageLevel  # noqa: PLC0415
    from pyspark.sql import functions as F  # noqa: PLC0415

    from quorum.analytics import jobs, report  # noqa: PLC0415
    from quorum.analytics.source import load  # noqa: PLC0415

    what = "the log and its snapshots" if include_snapshots else "the log"
    with progress.stage(f"decoding {what} (persisted for every job)"):
        records = load(spark, log_dir, includeSnapshots=include_snapshots).persist(
            StorageLevel.MEMORY_AND_DISK
        )
        # One pass: the log's offsets (group NULL) and each snapshot's rows.
        groups = (
            records.groupBy("snapshot_end_offset")
            .agg(
                F.count("*").alias("records"),
                F.min("offset").alias("first"),
                F.max("offset").alias("last"),
            )
            .collect()
        )
    log_group = [g for g in groups if g["snapshot_end_offset"] is None]
    coverage = jobs.Coverage.from_parts(
        log_group[0]["first"] if log_group else None,
        [g["snapshot_end_offset"] for g in groups if g["snapshot_end_offset"] is not None],
    )
    totals = {
        "records": sum(g["records"] for g in groups),
        "first": log_group[0]["first"] if log_group else None,
        "last": log_group[0]["last"] if log_group else None,
    }
    last_offset = totals["last"]
    if last_offset is None and coverage.snapshot_ends and coverage.snapshot_ends[-1] > 0:
        last_offset = coverage.snapshot_ends[-1] - 1  # everything is in the newest snapshot
    as_of = last_offset if as_of_offset is None else as_of_offset
    if as_of is not None:
        coverage.base_for(as_of)  # StateNotAvailableError before any job runs
    if coverage.snapshot_ends:
        ends = ", ".join(f"{end:,}" for end in coverage.snapshot_ends)
        print(
            f"    log from offset {coverage.log_start:,}; snapshots ending at {ends}",
            file=stdout,
        )
    outputs: list[str] = []

    def write(name: str, frame: Callable[[], DataFrame]) -> None:
        with progress.stage(name):
            frame().write.mode("overwrite").parquet(str(out / name))
        outputs.append(name)

    for name, job in jobs.JOBS.items():
        write(name, functools.partial(job, records, coverage))
    if as_of is not None:
        as_of_n = as_of
        write("state_as_of", lambda: jobs.state_as_of(records, as_of_n, coverage))
        write("acls_as_of", lambda: jobs.acls_as_of(records, as_of_n, coverage))
        write("voters_as_of", lambda: jobs.voters_as_of(records, as_of_n, coverage))

    with progress.stage("report and plots"):
        summary, reuse_rows = _report(
            spark, out, log_dir, totals=totals, as_of=as_of, outputs=outputs
        )
        summary.snapshot_ends = list(coverage.snapshot_ends)
        summary.stage_seconds = list(progress.seconds)
        table = report.format_name_reuse(reuse_rows, _NAME_REUSE_ROWS_PRINTED)
        path = report.write_report(out, summary, table)
    records.unpersist()
    print(f"\nName reuse ({len(reuse_rows):,} names had more than one topic id):", file=stdout)
    print(table, file=stdout)
    print(f"\nReport: {path}", file=stdout)


def _report(
    spark: SparkSession,
    out: Path,
    log_dir: Path,
    *,
    totals: Any,
    as_of: int | None,
    outputs: list[str],
) -> tuple[Any, list[dict[str, Any]]]:
    """Collect the small aggregates the report needs from the Parquet outputs; draw the plots."""
    import pandas as pd  # type: ignore[import-untyped]  # noqa: PLC0415
    from pyspark.sql import functions as F  # noqa: PLC0415

    from quorum.analytics import report  # noqa: PLC0415

    def parquet(name: str) -> DataFrame:
        return spark.read.parquet(str(out / name))

    lifecycle: Any = (
        parquet("topic_lifecycle").select("created_offset", "deleted_offset").toPandas()
    )
    reuse_rows = [row.asDict() for row in parquet("name_reuse").orderBy("name").collect()]
    leadership: Any = parquet("leadership_timeline").toPandas()
    per_broker = parquet("partitions_per_broker_over_time")
    last = totals["last"] if totals["last"] is not None else 0
    bucket_offsets = max(1, (last + 1) // _PLOT_BUCKETS)
    samples: Any = (
        per_broker.groupBy("broker_id", (F.col("offset") / bucket_offsets).cast("long"))
        .agg(F.max("offset").alias("offset"), F.max_by("partitions", "offset").alias("partitions"))
        .select("broker_id", "offset", "partitions")
        .toPandas()
    )
    brokers = parquet("broker_events").select("broker_id").distinct().count()

    deleted = [None if pd.isna(d) else int(d) for d in lifecycle["deleted_offset"]]
    offsets, alive = report.topics_alive_steps(list(lifecycle["created_offset"]), deleted)
    plots: list[tuple[str, str]] = []
    if offsets:
        report.plot_topics_alive(offsets, alive, out / "topics_alive.png")
        plots.append(("Topics alive over offsets", "topics_alive.png"))
    if not samples.empty:
        report.plot_partitions_per_broker(samples, out / "partitions_per_broker.png")
        plots.append(("Partitions per broker", "partitions_per_broker.png"))
    if not leadership.empty:
        report.plot_leadership(leadership, last, out / "leadership_timeline.png")
        plots.append(("Leadership timeline", "leadership_timeline.png"))
    summary = report.ReplaySummary(
        log_dir=str(log_dir),
        records=int(totals["records"]),
        first_offset=totals["first"],
        last_offset=totals["last"],
        as_of_offset=as_of,
        topic_ids=len(lifecycle),
        topics_alive=alive[-1] if alive else 0,
        names_reused=len(reuse_rows),
        leader_changes=len(leadership),
        brokers=brokers,
        outputs=list(outputs),
        plots=plots,
    )
    return summary, reuse_rows


def main(argv: list[str] | None = None) -> int:
    """The entry point for ``spark-submit .../quorum/analytics/replay.py`` (no master: the one
    spark-submit was given)."""
    parser = argparse.ArgumentParser(prog="replay.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--log-dir", required=True, help="metadata.log.dir or its log directory")
    parser.add_argument("--out", required=True, help="output directory (created)")
    parser.add_argument("--master", default=None, help="default: spark-submit's, else local[*]")
    parser.add_argument("--as-of-offset", type=int, default=None)
    parser.add_argument(
        "--include-snapshots",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="read the .checkpoint files too (default: iff the log does not start at offset 0)",
    )
    args = parser.parse_args(argv)
    return run_replay(
        args.log_dir,
        args.out,
        args.master,
        args.as_of_offset,
        include_snapshots=args.include_snapshots,
        verbose=True,  # spark-submit's own output is the submitter's to route
    )


if __name__ == "__main__":
    sys.exit(main())
