"""The ``metaquorum`` commands that read a metadata log offline, from its files: ``log dump``
(kafka-dump-log), ``metadata`` (kafka-metadata-shell), ``replay`` (the Spark analytics) and
``spark pack-env``. Each handler parses its arguments and calls the tool that does the work,
imported when the handler runs so that other commands do not pay for it.
"""

# ruff: noqa: PLC0415

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from quorum.cli_common import PROG, CommandError, Subparsers, non_negative_int, silence_stdout

__all__ = [
    "add_log_commands",
    "add_metadata_commands",
    "add_replay_commands",
    "add_spark_commands",
]

# ----- log ---------------------------------------------------------------------------------------


def add_log_commands(subparsers: Subparsers) -> None:
    log = subparsers.add_parser(
        "log",
        help="inspect metadata log segments (kafka-dump-log)",
        description="Inspect metadata log segments, like kafka-dump-log.sh "
        "--cluster-metadata-decoder.",
    )
    commands = log.add_subparsers(dest="log_command", metavar="COMMAND", required=True)
    dump = commands.add_parser(
        "dump",
        help="print every record as one JSON line",
        description="Print every record of the given segments as one JSON line: "
        '{"offset", "epoch", "type", "version", "data"} ("control": true for control '
        "records), type and data as Kafka's --cluster-metadata-decoder prints them "
        '({"type": "TOPIC_RECORD", "version": 0, "data": {"name": ..., "topicId": ...}}). '
        "Read-only: safe on the log of a running controller, where it stops at the "
        "last whole batch. Exits 1 at a corrupt batch, after printing the records before it.",
    )
    dump.add_argument(
        "paths",
        nargs="+",
        type=Path,
        metavar="PATH",
        help="a segment file (NNNNNNNNNNNNNNNNNNNN.log) or a metadata log directory "
        "(__cluster_metadata-0/, or the metadata.log.dir holding it): all its segments in order",
    )
    dump.add_argument(
        "--max-records",
        type=non_negative_int,
        metavar="N",
        help="stop after N records",
    )
    dump.add_argument(
        "--summary",
        action="store_true",
        help="print one JSON object of counts (batches, records, offsets, records per type) "
        "instead of the records",
    )
    dump.set_defaults(handler=log_dump)


def log_dump(args: argparse.Namespace) -> int:
    # Imported here so that other commands do not pay for it (nor quorum describe's gRPC).
    from quorum.tools.log_dump import dump_log

    paths: list[Path] = args.paths
    max_records: int | None = args.max_records
    summary: bool = args.summary
    try:
        return dump_log(paths, sys.stdout, sys.stderr, max_records=max_records, summary=summary)
    except BrokenPipeError:
        # The reader went away (`... | head`): stop quietly, as cat does.
        silence_stdout()
        return 0


# ----- metadata ----------------------------------------------------------------------------------


def add_metadata_commands(subparsers: Subparsers) -> None:
    metadata = subparsers.add_parser(
        "metadata",
        help="browse the metadata image of a snapshot and log, offline (kafka-metadata-shell)",
        description="Browse the metadata image as a file tree, like kafka-metadata-shell.sh: "
        "Kafka's paths (/image/topics/byName, /image/topics/byId, /image/cluster/brokers, "
        "/image/configs, /image/acls/byId, /local) and the older ones (/topics, /topicIds, "
        "/brokers, /configs, /deletedTopics, /metadataQuorum). The image is "
        "loaded offline and read-only from a snapshot and/or the log records after it.",
    )
    commands = metadata.add_subparsers(dest="metadata_command", metavar="COMMAND", required=True)
    source = argparse.ArgumentParser(add_help=False)
    source.add_argument(
        "--snapshot",
        type=Path,
        metavar="PATH",
        help="a snapshot file (NNNNNNNNNNNNNNNNNNNN-NNNNNNNNNN.checkpoint), or a metadata log "
        "directory whose newest valid snapshot is used",
    )
    source.add_argument(
        "--log",
        type=Path,
        metavar="DIR",
        help="a metadata log directory (__cluster_metadata-0/, or the metadata.log.dir holding "
        "it) whose records after the snapshot are replayed on top of it (without --snapshot: "
        "the whole log, which must start at offset 0)",
    )
    shell = commands.add_parser(
        "shell",
        parents=[source],
        help="an interactive shell: ls, cd, cat, find, tree, pwd, help, exit",
        description="An interactive shell over the image: ls, cd, cat, find, tree, pwd, help, "
        "exit.",
    )
    shell.set_defaults(handler=metadata_command)
    ls = commands.add_parser(
        "ls",
        parents=[source],
        help="list directories of the image (one entry per line)",
        description="List each PATH (default /): a directory's entries one per line, a file's "
        "own path. Exits 1 if a path does not exist.",
    )
    ls.add_argument("paths", nargs="*", metavar="PATH", help="e.g. /topics or /topics/orders")
    ls.set_defaults(handler=metadata_command)
    cat = commands.add_parser(
        "cat",
        parents=[source],
        help="print files of the image",
        description="Print each PATH, e.g. /topics/orders/0/data (partition JSON) or "
        "/brokers/1/registration. Exits 1 if a path does not exist or is a directory.",
    )
    cat.add_argument("paths", nargs="+", metavar="PATH")
    cat.set_defaults(handler=metadata_command)
    find = commands.add_parser(
        "find",
        parents=[source],
        help="print every path under a path (Kafka's find)",
        description="Print every path under each PATH (default /), itself first, one per line.",
    )
    find.add_argument("paths", nargs="*", metavar="PATH")
    find.set_defaults(handler=metadata_command)
    tree = commands.add_parser(
        "tree",
        parents=[source],
        help="print the tree under a path with the files' contents (Kafka's tree)",
        description="Print the tree under each PATH (default /): a directory as 'name:', a "
        "file as 'name: content', each level indented by two spaces.",
    )
    tree.add_argument("paths", nargs="*", metavar="PATH")
    tree.set_defaults(handler=metadata_command)


def metadata_command(args: argparse.Namespace) -> int:
    # Imported here so that other commands do not pay for it.
    from quorum.logs import configure_logging
    from quorum.tools.metadata_shell import (
        MetadataShellError,
        cat_paths,
        find_paths,
        load_image,
        ls_paths,
        run_shell,
        tree_paths,
    )

    snapshot: Path | None = args.snapshot
    log: Path | None = args.log
    command: str = args.metadata_command
    if snapshot is None and log is None:
        raise CommandError(f"metadata {command} needs --snapshot PATH, --log DIR or both")
    configure_logging("metadata")  # storage's warnings go to stderr, never into the output
    try:
        loaded = load_image(snapshot, log, lambda message: print(message, file=sys.stderr))
    except MetadataShellError as exc:
        raise CommandError(str(exc)) from exc
    try:
        if command == "ls":
            return ls_paths(loaded, args.paths, sys.stdout, sys.stderr)
        if command == "cat":
            return cat_paths(loaded, args.paths, sys.stdout, sys.stderr)
        if command == "find":
            return find_paths(loaded, args.paths, sys.stdout, sys.stderr)
        if command == "tree":
            return tree_paths(loaded, args.paths, sys.stdout, sys.stderr)
        return run_shell(loaded)
    except BrokenPipeError:
        silence_stdout()
        return 0


# ----- replay ----------------------------------------------------------------------------------


def add_replay_commands(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="replay a metadata log with Spark into Parquet tables and a report",
        description=(
            "Read a metadata log directory (segments, and snapshots if present) with the "
            "metaquorum PySpark data source and write the analytics tables (topic lifecycle, "
            "name reuse, partitions per broker, leadership timeline, broker events, state as "
            "of an offset) as Parquet plus report.md with plots under --out."
        ),
    )
    parser.add_argument(
        "--log-dir", type=Path, required=True, help="metadata.log.dir or __cluster_metadata-0/"
    )
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument(
        "--master",
        default="local[*]",
        help="Spark master URL (default local[*]): spark://HOST:7077, yarn, k8s://URL; the "
        "driver runs here (client mode), the log directory and --out must be visible under the "
        "same paths to every worker",
    )
    parser.add_argument(
        "--ship-env",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="on a cluster master, ship this environment to the executors (packed once into "
        "~/.cache/metaquorum/spark-env, or under $METAQUORUM_CACHE; passed as spark.archives "
        "with spark.pyspark.python); --no-ship-env: the workers already have a Python with "
        "metaquorum[analytics] (spark.pyspark.python via --conf, else $PYSPARK_PYTHON, else "
        "python3 on their PATH). Default: ship",
    )
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        type=_spark_setting,
        help="a Spark setting, as spark-submit's --conf (repeatable), e.g. "
        "spark.executor.memory=2g",
    )
    parser.add_argument("--as-of-offset", type=int, default=None, help="state as of this offset")
    parser.add_argument(
        "--include-snapshots",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="read the .checkpoint files too (default: when the log does not start at offset 0)",
    )
    parser.add_argument(
        "--follow",
        action="store_true",
        help="keep following the log as the node appends to it: a Structured Streaming query "
        "appends every record to OUT/records/ (Parquet, exactly once across restarts: its "
        "checkpoint is OUT/_checkpoints/records/) until SIGINT/SIGTERM or --until-offset; the "
        "analytics tables and the report are recomputed from it every --refresh-interval and "
        "swapped in whole under OUT/current (OUT/topic_lifecycle, ... link there)",
    )
    parser.add_argument(
        "--until-offset",
        type=int,
        default=None,
        metavar="N",
        help="with --follow: stop once every record up to offset N (inclusive) is written",
    )
    parser.add_argument(
        "--trigger-interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="with --follow: start a micro-batch every SECONDS (default 1; 0: as soon as the "
        "previous one ends)",
    )
    parser.add_argument(
        "--refresh-interval",
        type=float,
        default=None,
        metavar="SECONDS",
        help="with --follow: recompute the analytics tables from the records table at most "
        "every SECONDS while it has new records (default 30; never sooner than the last "
        "refresh took after it ended: each reads every record so far)",
    )
    parser.add_argument(
        "--no-tables",
        dest="tables",
        action="store_false",
        help="with --follow: keep OUT/records/ only, not the analytics tables",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="let Spark and the JVM print their own start-up lines and warnings to the terminal "
        "(default: into OUT/spark.log)",
    )
    parser.set_defaults(handler=replay)


def replay(args: argparse.Namespace) -> int:
    from quorum.extras import MissingExtraError, require_extra

    try:
        require_extra("analytics", f"{PROG} replay")
    except MissingExtraError as exc:
        raise CommandError(str(exc)) from None
    settings: list[tuple[str, str]] = args.conf
    if args.follow:
        return _follow(args, dict(settings))
    if args.until_offset is not None:
        raise CommandError("--until-offset needs --follow")
    if args.refresh_interval is not None or not args.tables:
        raise CommandError("--refresh-interval and --no-tables need --follow")
    from quorum.analytics.replay import run_replay

    return run_replay(
        args.log_dir,
        args.out,
        master=args.master,
        as_of_offset=args.as_of_offset,
        include_snapshots=args.include_snapshots,
        ship_env=args.ship_env,
        conf=dict(settings),
        verbose=args.verbose,
    )


def _follow(args: argparse.Namespace, settings: dict[str, str]) -> int:
    """``replay --follow``: the flags of a one-off replay mean nothing to a stream."""
    if args.as_of_offset is not None or args.include_snapshots is not None:
        raise CommandError(
            "--follow keeps the tables as of its last record, from the log it streams: "
            "--as-of-offset and --include-snapshots belong to a one-off replay (run it "
            "without --follow)"
        )
    from quorum.analytics.follow import run_follow

    return run_follow(
        args.log_dir,
        args.out,
        master=args.master,
        until_offset=args.until_offset,
        trigger_interval_s=args.trigger_interval,
        refresh_interval_s=30.0 if args.refresh_interval is None else args.refresh_interval,
        tables=args.tables,
        ship_env=args.ship_env,
        conf=settings,
        stdout=sys.stdout,
        stderr=sys.stderr,
        verbose=args.verbose,
    )


def _spark_setting(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` of ``--conf``."""
    key, equals, value = text.partition("=")
    if not equals or not key.strip():
        raise argparse.ArgumentTypeError(
            f"{text!r} is not KEY=VALUE (e.g. --conf spark.executor.memory=2g)"
        )
    return key.strip(), value


def add_spark_commands(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "spark",
        help="pack the executors' environment for spark-submit (replay --master ships it itself)",
    )
    commands = parser.add_subparsers(dest="spark_command", required=True)
    pack = commands.add_parser(
        "pack-env",
        help="write the Python environment the executors need as one archive",
        description=(
            "Write the environment a Spark cluster's executors need to run the metaquorum "
            "data source (quorum, msgpack, msgspec, crc32c, structlog, pyarrow, numpy and their "
            "requirements, from this installation) as a venv layout in one archive, to ship "
            "with spark-submit --archives FILE#env --conf spark.pyspark.python=./env/bin/python. "
            "Every worker needs this Python version at the same path; in client mode ./env "
            "must also exist where spark-submit runs (quorum/analytics/pack.py). "
            "metaquorum replay --master URL needs none of this: it ships the same archive "
            "itself."
        ),
    )
    pack.add_argument(
        "--out",
        type=Path,
        required=True,
        metavar="FILE",
        help="the archive to write: .tar.gz or .tgz (Spark unpacks a plain .tar without "
        "file permissions)",
    )
    pack.set_defaults(handler=spark_pack_env)


def spark_pack_env(args: argparse.Namespace) -> int:
    from quorum.analytics.pack import PackError, pack_env

    try:
        path = pack_env(args.out)
    except PackError as exc:
        raise CommandError(str(exc)) from None
    size_mib = path.stat().st_size / (1 << 20)
    print(f"wrote {path} ({size_mib:.0f} MiB); submit with:")
    print(
        f"  PYSPARK_DRIVER_PYTHON={sys.executable} spark-submit --master spark://HOST:7077 "
        f"--archives {path}#env --conf spark.pyspark.python=./env/bin/python "
        "quorum/analytics/replay.py --log-dir DIR --out DIR"
    )
    return 0
