"""``metaquorum replay --follow``: the decoded metadata log kept current as a Parquet table.

One Structured Streaming query (``quorum.analytics.stream``) follows the log directory of a
running controller or broker and appends each micro-batch's records to ``OUT/records/`` with
Spark's file sink, its checkpoint in ``OUT/_checkpoints/records/``. The file sink commits a
micro-batch's files in its own log (``records/_spark_metadata``) only after they are written,
and the checkpoint records which offsets each micro-batch covered before it runs: a query
stopped anywhere (Ctrl-C, SIGTERM, kill -9, a failed task) and started again with the same
``--out`` writes every record exactly once (read the table with ``spark.read.parquet``, which
goes through ``_spark_metadata``; files of a micro-batch that was cut short are never listed).

Beside it, the analytics tables of a one-off ``replay`` (topic lifecycle, name reuse, the
image as of the last offset, ...) and its report are recomputed from ``OUT/records/`` every
``--refresh-interval`` seconds while the stream has new records, and swapped in whole under
``OUT/current`` (``quorum.analytics.follow_tables``: how, what it costs, how fresh).

It stops on SIGINT or SIGTERM (the micro-batch and the table refresh in flight are abandoned:
the batch is written again on the next start, the tables stay at their last complete
version) and, with ``--until-offset N``, once every record up to offset N is committed and
the tables reflect them.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from quorum.analytics.follow_tables import CURRENT, OutError, TableRefresher, prepare_out

__all__ = ["CHECKPOINTS", "RECORDS", "run_follow"]

RECORDS = "records"
CHECKPOINTS = "_checkpoints"
# How often the command looks at the query (signals, --until-offset, progress to print).
_POLL_S = 0.2
_LOCAL_SHUFFLE_PARTITIONS = 4


@contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[Callable[[], None]]:
    """SIGINT and SIGTERM set ``stop`` instead of raising in the middle of a Py4J call. Yields
    the function that installs the handler again: PySpark's context replaces the SIGINT
    handler with its own (which raises KeyboardInterrupt) when it starts."""

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    def install() -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, handler)

    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    install()
    try:
        yield install
    finally:
        for sig, previous in saved.items():
            signal.signal(sig, previous)


def run_follow(
    log_dir: str | Path,
    out: str | Path,
    master: str | None = "local[*]",
    *,
    until_offset: int | None = None,
    trigger_interval_s: float = 1.0,
    refresh_interval_s: float = 30.0,
    tables: bool = True,
    ship_env: bool = True,
    conf: Mapping[str, str] | None = None,
    stdout: TextIO,
    stderr: TextIO,
    verbose: bool = False,
) -> int:
    """Follow ``log_dir`` into ``out`` until a signal or ``until_offset``, refreshing the
    analytics tables every ``refresh_interval_s`` seconds (``tables`` False: the records table
    only); the exit code (0, or 1 with one
    ``Error:`` line on ``stderr``)."""
    from pyspark.errors import PySparkException  # noqa: PLC0415
    from pyspark.errors.exceptions.captured import StreamingQueryException  # noqa: PLC0415

    from quorum.analytics.failure import root_cause  # noqa: PLC0415
    from quorum.analytics.log_files import LogReadError, list_log_files  # noqa: PLC0415
    from quorum.analytics.pack import PackError  # noqa: PLC0415
    from quorum.analytics.replay import SPARK_LOG, Progress, build_session, cluster_python  # noqa: PLC0415
    from quorum.analytics.source import MetaquorumDataSource  # noqa: PLC0415
    from quorum.analytics.stream import checkpointed_offset  # noqa: PLC0415

    if until_offset is not None and until_offset < 0:
        print(f"Error: --until-offset must be >= 0, got {until_offset}", file=stderr)
        return 1
    if trigger_interval_s < 0:
        print(
            f"Error: --trigger-interval must be >= 0 seconds, got {trigger_interval_s}", file=stderr
        )
        return 1
    if refresh_interval_s < 0:
        print(
            f"Error: --refresh-interval must be >= 0 seconds, got {refresh_interval_s}",
            file=stderr,
        )
        return 1
    log_path, out_path = Path(os.path.abspath(log_dir)), Path(os.path.abspath(out))
    try:
        list_log_files(log_path)
    except LogReadError as exc:
        print(f"Error: {exc}", file=stderr)
        return 1
    out_path.mkdir(parents=True, exist_ok=True)
    try:
        if tables:
            prepare_out(out_path)
    except OutError as exc:
        print(f"Error: {exc}", file=stderr)
        return 1
    table, checkpoint = out_path / RECORDS, out_path / CHECKPOINTS / RECORDS
    settings = dict(conf or {})
    cluster_master = master is not None and not master.startswith("local")
    if not cluster_master:
        # The tables' jobs shuffle small data: Spark's 200 partitions cost about a quarter of a
        # refresh on a local master (AQE coalesces them only after they are written).
        settings.setdefault("spark.sql.shuffle.partitions", str(_LOCAL_SHUFFLE_PARTITIONS))
    progress = Progress(total=2 + (1 if cluster_master and ship_env else 0), out=stdout)
    try:
        cluster = cluster_python(ship_env, settings, progress) if cluster_master else None
    except PackError as exc:
        print(f"Error: {exc}", file=stderr)
        return 1
    stop = threading.Event()
    with _stop_on_signals(stop) as install_handlers:
        try:
            with progress.stage(f"starting Spark ({master})"):
                jvm_log = None if verbose else out_path / SPARK_LOG
                spark = build_session(
                    master,
                    "metaquorum-replay-follow",
                    jvm_log=jvm_log,
                    conf=settings,
                    cluster=cluster,
                )
        except PySparkException as exc:
            print(f"Error: {root_cause(str(exc))}", file=stderr)
            return 1
        install_handlers()
        try:
            if stop.is_set():
                print("    stopped by a signal before the stream started", file=stdout)
                return 0
            resumed = checkpointed_offset(checkpoint)
            where = "from the log start" if resumed is None else f"from offset {resumed:,}"
            with progress.stage(f"following {log_path} into {table} ({where})"):
                spark.dataSource.register(MetaquorumDataSource)
                reader = spark.readStream.format("metaquorum").option("startingOffsets", "earliest")
                if until_offset is not None:
                    reader = reader.option("endingOffsets", str(until_offset + 1))
                writer = (
                    reader.load(str(log_path))
                    .writeStream.format("parquet")
                    .option("path", str(table))
                    .option("checkpointLocation", str(checkpoint))
                    .queryName("metaquorum_records")
                )
                if trigger_interval_s > 0:
                    writer = writer.trigger(processingTime=f"{trigger_interval_s} seconds")
                query = writer.start()
            refresher = (
                None
                if not tables
                else TableRefresher(
                    spark,
                    out_path,
                    log_path,
                    functools.partial(checkpointed_offset, checkpoint),
                    caught_up=lambda: query.lastProgress is not None,
                    final_refresh=until_offset is not None,
                    interval_s=refresh_interval_s,
                    stdout=stdout,
                )
            )
            if refresher is not None:
                refresher.start()
            return _watch(
                query, checkpoint, until_offset, stop, refresher, stdout=stdout, stderr=stderr
            )
        except StreamingQueryException as exc:
            print(f"Error: {root_cause(str(exc))}", file=stderr)
            return 1
        finally:
            spark.stop()


def _watch(
    query: Any,
    checkpoint: Path,
    until_offset: int | None,
    stop: threading.Event,
    refresher: TableRefresher | None,
    *,
    stdout: TextIO,
    stderr: TextIO,
) -> int:
    """Print each micro-batch that wrote records; stop the query on a signal, at
    ``until_offset`` (after a last refresh of the tables), or report its failure or the
    tables'."""
    from quorum.analytics.failure import root_cause  # noqa: PLC0415
    from quorum.analytics.stream import checkpointed_offset  # noqa: PLC0415

    printed = -1
    reason = "stopped"
    while True:
        if stop.wait(_POLL_S):
            reason = "stopped by a signal"
            break
        if not query.isActive:
            failure = query.exception()
            if failure is not None:
                cause = root_cause(str(failure))
                print(f"Error: {cause}", file=stderr)
                if cause.startswith("StreamOffsetError"):
                    print(
                        "What to do: run replay --follow with a new --out (the table and "
                        f"checkpoint under {checkpoint.parent.parent} go on from the old "
                        "stream's offset)",
                        file=stderr,
                    )
                return 1
            break
        if refresher is not None and refresher.error is not None:
            refresher.stop()
            query.stop()
            print(f"Error: refreshing the tables: {root_cause(str(refresher.error))}", file=stderr)
            return 1
        progress = query.lastProgress
        if progress is not None and progress["batchId"] != printed:
            printed = progress["batchId"]
            if progress["numInputRows"]:
                sources = progress["sources"]
                end = int(json.loads(sources[0]["endOffset"])["offset"])
                print(
                    f"    batch {printed}: {progress['numInputRows']:,} records, up to offset "
                    f"{end - 1:,} ({time.strftime('%H:%M:%S', time.gmtime())} UTC)",
                    file=stdout,
                    flush=True,
                )
        if until_offset is not None:
            committed = checkpointed_offset(checkpoint)
            if committed is not None and committed > until_offset:
                reason = f"every record up to offset {until_offset:,} is written"
                break
    query.stop()
    if refresher is not None:
        refresher.stop()
    committed = checkpointed_offset(checkpoint)
    upto = "no record yet" if committed is None else f"records up to offset {committed - 1:,}"
    print(f"    {reason}: {upto} committed ({checkpoint})", file=stdout)
    if refresher is None:
        return 0
    if until_offset is not None and not stop.is_set() and refresher.behind():
        try:
            refresher.refresh()  # the tables of every record written
        except Exception as exc:  # a Spark job's failure, a full disk: reported, not raised
            print(f"Error: refreshing the tables: {root_cause(str(exc))}", file=stderr)
            return 1
    tables = refresher.published
    if tables is None:
        print("    tables: none yet", file=stdout)
    else:
        print(
            f"    tables: up to offset {tables.up_to_offset:,} "
            f"({refresher.out / CURRENT}, refreshed {tables.refreshed_at})",
            file=stdout,
        )
    return 0
