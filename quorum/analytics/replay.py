"""``metaquorum replay``: every replay job over a metadata log, as Parquet plus a report.

Local (the default master is ``local[*]``)::

    metaquorum replay --log-dir .data/controller-1 --out replay-out [--as-of-offset N]

On a cluster, the same command with its master (``spark://host:7077``, ``yarn``,
``k8s://https://host:6443``; the driver runs here, in client mode)::

    metaquorum replay --master spark://host:7077 --log-dir /shared/controller-1 \\
        --out /shared/replay-out [--conf spark.executor.memory=2g ...]

The executors need Python with this project's ``quorum`` package and the libraries its data
source imports (msgpack, msgspec, crc32c, structlog, pyarrow, numpy). ``replay`` ships them:
it packs them from this installation once (``quorum.analytics.pack.cached_env``: kept in the
user's cache, named by a hash of its contents, packed again only when a dependency or a
source of ``quorum`` changes), passes the archive as ``spark.archives ARCHIVE#env`` and sets
``spark.pyspark.python=./env/bin/python``, which every executor finds in its working
directory. Every worker needs the same base Python at the same path (quorum/analytics/pack.py).
``--no-ship-env`` is for clusters whose workers already have such a Python: the executors then
run ``spark.pyspark.python`` if ``--conf`` sets it, else ``$PYSPARK_PYTHON``, else ``python3``
from the workers' PATH, as Spark does.

The driver's side (client mode). PySpark gives the driver's own Python workers (they plan the
data source) the executors' ``spark.pyspark.python`` too, so ``./env/bin/python`` must be this
interpreter where the driver's JVM runs. ``replay`` starts the JVM in a directory of its cache
whose ``env`` links to this interpreter's environment (``pack.driver_dir``), with this
interpreter's directory first on its PATH (a bare ``python3`` is this one too): no symlink to
make by hand, no environment to activate. Log and output paths are made absolute first; the
log directory must be visible under the same path to the driver and every worker (listing
happens on the driver, reading on the workers: a shared file system), and so must ``--out``
(the executors write the Parquet tables).

With ``spark-submit`` (cluster deploy mode, or a site's own submission tooling), ship the
archive of ``metaquorum spark pack-env`` the same way by hand; the driver, in client mode,
needs ``./env`` where spark-submit runs, e.g. a symlink to its own virtualenv::

    metaquorum spark pack-env --out /tmp/metaquorum-env.tar.gz
    ln -s "$VIRTUAL_ENV" env
    PYSPARK_DRIVER_PYTHON=python spark-submit --master spark://host:7077 \\
        --archives /tmp/metaquorum-env.tar.gz#env \\
        --conf spark.pyspark.python=./env/bin/python \\
        /path/to/metaquorum/quorum/analytics/replay.py \\
        --log-dir /shared/controller-1 --out /shared/replay-out

Under ``spark-submit`` no master is set here (``--master`` of spark-submit wins), nothing is
shipped, and the loopback settings for local runs are not applied.

Errors. A job that fails is reported by its root cause (``quorum.analytics.failure``): one
``Error:`` line with the last exception of the Python traceback and the executor it happened
on, what to do when the cause is a known one, where the executor's log is, and the whole error
(with the JVM's stack traces) in ``OUT/error.log``.

Outputs in ``--out``: one Parquet directory per job (``topic_lifecycle/``, ``name_reuse/``,
``partitions_per_broker_over_time/``, ``leadership_timeline/``, ``partition_elections/``,
``broker_events/``, ``state_as_of/``, ``voters_as_of/``), ``report.md`` and its PNG plots. The
decoded log is persisted once (memory, then disk) and every job runs on it.

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
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "SHIPPED_PYTHON",
    "ClusterPython",
    "Progress",
    "build_session",
    "cluster_python",
    "main",
    "run_replay",
    "write_tables",
]

# Offsets per broker kept for the partitions-per-broker plot (the job's output itself is full).
_PLOT_BUCKETS = 400
_NAME_REUSE_ROWS_PRINTED = 20
# Where a local run puts the JVM's output (under --out), unless --verbose.
SPARK_LOG = "spark.log"
# Where a failed job's whole error goes (under --out).
ERROR_LOG = "error.log"


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


class Progress:
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


@dataclass(frozen=True)
class ClusterPython:
    """The Python of a cluster's executors, and how the driver starts its JVM for it.

    ``python``: the executors' interpreter (``spark.pyspark.python``, which PySpark reads from
    ``PYSPARK_PYTHON`` when its context starts); ``archive``: the environment shipped as
    ``spark.archives ARCHIVE#env`` (None: not shipped); ``driver_dir``: the directory the
    driver's JVM runs in, whose ``env`` is this interpreter's environment, so that the driver's
    own Python workers (which get ``python`` too) run this interpreter."""

    python: str
    archive: Path | None
    driver_dir: Path


# The executors' Python for the shipped archive, unpacked as env/ in their working directory.
SHIPPED_PYTHON = "./env/bin/python"


@contextmanager
def _jvm_started_for(cluster: ClusterPython) -> Iterator[None]:
    """While the JVM starts (it inherits them) and PySpark's context reads ``PYSPARK_PYTHON``:
    the working directory is ``cluster.driver_dir``, ``PYSPARK_PYTHON`` the executors' Python
    and this interpreter's directory is first on PATH. All three are restored afterwards; the
    JVM keeps them for its lifetime. (A process whose earlier session left its JVM running,
    as PySpark keeps it until the process exits, reuses that JVM and its working directory:
    ``replay`` starts one session per process.)"""
    saved_cwd = os.getcwd()
    saved = {name: os.environ.get(name) for name in ("PYSPARK_PYTHON", "PATH")}
    os.environ["PYSPARK_PYTHON"] = cluster.python
    os.environ["PATH"] = os.pathsep.join(
        part for part in (str(Path(sys.executable).parent), saved["PATH"]) if part
    )
    os.chdir(cluster.driver_dir)
    try:
        yield
    finally:
        os.chdir(saved_cwd)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def build_session(
    master: str | None = "local[*]",
    app_name: str = "metaquorum-replay",
    *,
    jvm_log: Path | None = None,
    conf: Mapping[str, str] | None = None,
    cluster: ClusterPython | None = None,
) -> Any:
    """A Spark session on ``master`` (None: whatever ``spark-submit`` set). Local masters bind
    to loopback only, run the Python workers with this interpreter and get a 4 GiB heap
    (``SPARK_DRIVER_MEMORY`` overrides it). ``jvm_log``: a file that gets the JVM's and Spark's
    own output (the start-up chatter of Spark and Py4J) instead of the terminal. ``conf``: more
    settings, applied last (``--conf``; a ``spark.archives`` there is kept beside the shipped
    one). ``cluster``: the executors' Python on a cluster master (``ClusterPython``)."""
    # spark-submit hands the Python driver a running JVM through PYSPARK_GATEWAY_PORT.
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    local = master.startswith("local") if master is not None else not submitted
    if local:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession  # noqa: PLC0415 - pyspark only when replaying

    settings = dict(conf or {})
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
    if cluster is not None:
        # For the record (the environment tab, spark-submit's own runner): PySpark itself
        # takes the executors' Python from PYSPARK_PYTHON (_jvm_started_for).
        builder = builder.config("spark.pyspark.python", cluster.python).config(
            "spark.pyspark.driver.python", sys.executable
        )
        if cluster.archive is not None:
            shipped = f"{cluster.archive}#env"
            given = settings.pop("spark.archives", "")
            builder = builder.config("spark.archives", ",".join(filter(None, [given, shipped])))
    builder = builder.config("spark.sql.session.timeZone", "UTC").config(
        "spark.ui.showConsoleProgress", "false"
    )
    for key, value in settings.items():
        builder = builder.config(key, value)
    started_for = _jvm_started_for(cluster) if cluster is not None else nullcontext()
    with _stderr_to(jvm_log if not submitted else None), started_for:
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def cluster_python(ship_env: bool, conf: Mapping[str, str], progress: Progress) -> ClusterPython:
    """The executors' Python for a cluster master: the shipped archive (packed unless the cache
    has it), or with ``ship_env`` False ``spark.pyspark.python`` from ``conf``, else
    ``$PYSPARK_PYTHON``, else ``python3``. Raises ``PackError``."""
    from quorum.analytics.pack import cached_env, driver_dir  # noqa: PLC0415

    if not ship_env:
        python = conf.get("spark.pyspark.python") or os.environ.get("PYSPARK_PYTHON") or "python3"
        return ClusterPython(python=python, archive=None, driver_dir=driver_dir())
    with progress.stage("the executors' environment (packed once, then cached)"):
        shipped = cached_env()
    print(f"    {'reused' if shipped.reused else 'packed'} {shipped.path}", file=progress.out)
    return ClusterPython(python=SHIPPED_PYTHON, archive=shipped.path, driver_dir=driver_dir())


def run_replay(
    log_dir: str | Path,
    out: str | Path,
    master: str | None = "local[*]",
    as_of_offset: int | None = None,
    *,
    include_snapshots: bool | None = None,
    ship_env: bool = True,
    conf: Mapping[str, str] | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    verbose: bool = False,
) -> int:
    """Replay the log in ``log_dir`` (a ``metadata.log.dir`` or its ``__cluster_metadata-0``)
    into ``out``; ``as_of_offset`` (default: the last offset) for ``state_as_of``;
    ``include_snapshots`` None: read the snapshots iff the log does not start at offset 0 (see
    the module docstring). On a cluster master, ``ship_env`` ships this environment to the
    executors (the module docstring); ``conf``: Spark settings (``--conf``). Prints the stages
    and the name-reuse table. Returns the exit code: 0, or 1 with a message on stderr (a failed
    job: its root cause, ``quorum.analytics.failure``). The JVM's own output (Spark's and
    Py4J's start-up lines, its warnings) goes to ``OUT/spark.log`` unless ``verbose``."""
    from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]  # noqa: PLC0415
    from pyspark.errors import PySparkException  # noqa: PLC0415

    from quorum.analytics.failure import root_cause  # noqa: PLC0415
    from quorum.analytics.jobs import StateNotAvailableError  # noqa: PLC0415
    from quorum.analytics.pack import PackError  # noqa: PLC0415
    from quorum.analytics.source import LogReadError, list_log_files  # noqa: PLC0415

    out_stream = stdout or sys.stdout
    err_stream = stderr or sys.stderr
    settings = dict(conf or {})
    if as_of_offset is not None and as_of_offset < 0:
        print(f"Error: --as-of-offset must be >= 0, got {as_of_offset}", file=err_stream)
        return 1
    cluster_master = master is not None and not master.startswith("local")
    if cluster_master and ship_env and "spark.pyspark.python" in settings:
        print(
            f"Error: --conf spark.pyspark.python={settings['spark.pyspark.python']} names the "
            "executors' Python, but replay ships its own environment for them: add "
            "--no-ship-env to use that Python, or drop the setting",
            file=err_stream,
        )
        return 1
    # Absolute: the executors resolve these paths, and on a cluster the driver's JVM runs
    # in a directory of its own (ClusterPython).
    log_path, out_path = Path(os.path.abspath(log_dir)), Path(os.path.abspath(out))
    try:
        segments, checkpoints = list_log_files(log_path)
    except LogReadError as exc:
        print(f"Error: {exc}", file=err_stream)
        return 1
    if include_snapshots is None:
        include_snapshots = not segments or segments[0].base_offset > 0
    if not segments and not (include_snapshots and checkpoints):
        print(f"Error: no log segments (NNNN.log) under {log_dir}", file=err_stream)
        return 1
    out_path.mkdir(parents=True, exist_ok=True)
    from pyspark.sql import SparkSession  # noqa: PLC0415

    from quorum.analytics.jobs import JOBS  # noqa: PLC0415

    # Inside a program that already has a session (tests, a notebook): use it, leave it.
    existing = SparkSession.getActiveSession()
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    on_cluster = cluster_master and existing is None and not submitted
    # [The executors' environment,] Spark, decoding, each job, state_as_of, acls_as_of,
    # voters_as_of, the report.
    progress = Progress(total=len(JOBS) + 6 + (1 if on_cluster and ship_env else 0), out=out_stream)
    cluster: ClusterPython | None = None
    try:
        if on_cluster:
            cluster = cluster_python(ship_env, settings, progress)
    except PackError as exc:
        print(f"Error: {exc}", file=err_stream)
        return 1
    try:
        with progress.stage(f"starting Spark ({master or 'from spark-submit'})"):
            jvm_log = None if verbose else out_path / SPARK_LOG
            spark = (
                existing
                if existing is not None
                else build_session(master, jvm_log=jvm_log, conf=settings, cluster=cluster)
            )
        try:
            _replay(
                spark,
                log_path,
                out_path,
                as_of_offset=as_of_offset,
                include_snapshots=include_snapshots,
                progress=progress,
                stdout=out_stream,
            )
        except (PySparkException, Py4JJavaError) as exc:
            # Described while the application runs: its REST API knows the executors' logs.
            raise _JobFailed(_describe(exc, spark, master, cluster, out_path)) from exc
        finally:
            if existing is None:
                spark.stop()
    except _JobFailed as failed:
        print(file=out_stream)
        for line in failed.lines:
            print(line, file=err_stream)
        if not verbose and (out_path / SPARK_LOG).exists():
            print(f"Spark's own log (the driver's): {out_path / SPARK_LOG}", file=err_stream)
        return 1
    except (LogReadError, StateNotAvailableError) as exc:
        print(file=out_stream)
        print(f"Error: {exc}", file=err_stream)
        return 1
    except (PySparkException, Py4JJavaError) as exc:  # Spark did not start
        print(file=out_stream)
        print(f"Error: {root_cause(str(exc))}", file=err_stream)
        if not verbose and (out_path / SPARK_LOG).exists():
            print(f"Spark's own log: {out_path / SPARK_LOG}", file=err_stream)
        return 1
    return 0


class _JobFailed(Exception):
    """A Spark job failed; ``lines`` report it (``quorum.analytics.failure``)."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__(lines[0] if lines else "")
        self.lines = lines


def _describe(
    exc: BaseException, spark: Any, master: str | None, cluster: ClusterPython | None, out: Path
) -> list[str]:
    """The report of a failed job, its whole error written to ``OUT/error.log``."""
    from quorum.analytics.failure import describe  # noqa: PLC0415

    whole = "".join(traceback.format_exception(exc))
    # PySpark's captured exceptions keep the JVM's stack trace aside (printed only when the
    # session's spark.sql.pyspark.jvmStacktrace.enabled is on where the error is converted).
    jvm_stack = getattr(exc, "_stackTrace", None)
    if isinstance(jvm_stack, str) and jvm_stack not in whole:
        whole += f"\nJVM stack trace:\n{jvm_stack}\n"
    context = spark.sparkContext
    failure = describe(
        whole,
        master=master,
        app_id=context.applicationId,
        ui_url=context.uiWebUrl,
        shipped=cluster is not None and cluster.archive is not None,
        python=cluster.python if cluster is not None else None,
    )
    lines = failure.lines()
    error_log = out / ERROR_LOG
    try:
        error_log.write_text(whole)
    except OSError as write_error:
        lines.append(f"(could not write the whole error to {error_log}: {write_error})")
    else:
        lines.append(f"The whole error (Python and JVM stack traces): {error_log}")
    return lines


def _replay(
    spark: SparkSession,
    log_dir: Path,
    out: Path,
    *,
    as_of_offset: int | None,
    include_snapshots: bool,
    progress: Progress,
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
    path, reuse_rows = write_tables(
        spark,
        records,
        coverage,
        out,
        log_dir,
        totals=totals,
        as_of=as_of,
        stage=progress.stage,
        stage_seconds=progress.seconds,
    )
    table = report.format_name_reuse(reuse_rows, _NAME_REUSE_ROWS_PRINTED)
    records.unpersist()
    print(f"\nName reuse ({len(reuse_rows):,} names had more than one topic id):", file=stdout)
    print(table, file=stdout)
    print(f"\nReport: {path}", file=stdout)


def write_tables(
    spark: SparkSession,
    records: DataFrame,
    coverage: Any,
    out: Path,
    log_dir: Path,
    *,
    totals: Mapping[str, Any],
    as_of: int | None,
    stage: Callable[[str], Any],
    stage_seconds: list[tuple[str, float]],
) -> tuple[Path, list[dict[str, Any]]]:
    """Every job's Parquet table under ``out`` (``out/NAME/``) from the decoded ``records``
    (persisted by the caller: every job reads them), the image tables as of ``as_of`` (None:
    none), then ``out/report.md`` and its plots. ``stage(name)`` times each step (a context
    manager); ``stage_seconds`` are the report's stage timings. Returns the report's path and
    the name-reuse rows. ``replay`` and ``replay --follow``'s refreshes
    (``quorum.analytics.follow_tables``) both write their tables with it."""
    from quorum.analytics import jobs, report  # noqa: PLC0415

    outputs: list[str] = []

    def write(name: str, frame: Callable[[], DataFrame]) -> None:
        with stage(name):
            frame().write.mode("overwrite").parquet(str(out / name))
        outputs.append(name)

    for name, job in jobs.JOBS.items():
        write(name, functools.partial(job, records, coverage))
    if as_of is not None:
        as_of_n = as_of
        write("state_as_of", lambda: jobs.state_as_of(records, as_of_n, coverage))
        write("acls_as_of", lambda: jobs.acls_as_of(records, as_of_n, coverage))
        write("voters_as_of", lambda: jobs.voters_as_of(records, as_of_n, coverage))

    with stage("report and plots"):
        summary, reuse_rows = _report(
            spark, out, log_dir, totals=totals, as_of=as_of, outputs=outputs
        )
        summary.snapshot_ends = list(coverage.snapshot_ends)
        summary.stage_seconds = list(stage_seconds)
        table = report.format_name_reuse(reuse_rows, _NAME_REUSE_ROWS_PRINTED)
        path = report.write_report(out, summary, table)
    return path, reuse_rows


def _report(
    spark: SparkSession,
    out: Path,
    log_dir: Path,
    *,
    totals: Mapping[str, Any],
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
    elections = {
        row["cause"]: int(row["count"])
        for row in parquet("partition_elections").groupBy("cause").count().collect()
    }

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
        partition_elections=elections,
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
