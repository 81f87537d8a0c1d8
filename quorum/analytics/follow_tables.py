"""``metaquorum replay --follow``'s analytics tables: refreshed from the records table, swapped
in whole.

The stream (``quorum.analytics.follow``) appends the decoded records to ``OUT/records/``. A
refresher thread beside it recomputes every table of a one-off ``replay`` (the jobs of
``quorum.analytics.jobs``, the image tables ``state_as_of``, ``acls_as_of`` and
``voters_as_of`` as of the last record read, ``report.md`` and its plots) from the committed
records and publishes them together:

1. the tables are written into a new version directory, ``OUT/_tables/<offset>-<ms>/``, each
   with a freshness file (``_metaquorum_freshness.json``: the offset it reflects, how many
   records, when), then every file and directory of the version is fsynced;
2. a symlink ``OUT/.current.tmp`` to that version is renamed over ``OUT/current`` (a rename
   replaces a symlink atomically), and ``OUT`` is fsynced;
3. versions older than the previous one are removed (a reader that resolved ``current`` just
   before the swap can still finish its read).

``OUT/topic_lifecycle``, ``OUT/name_reuse``, ... and ``OUT/report.md`` are symlinks to
``current/<name>``, made once: a reader sees the whole previous version or the whole new one,
never a half-written table. A crash (Ctrl-C, SIGTERM, kill -9, power loss) anywhere leaves
``current`` on the last complete version; the next start removes the versions it does not
point to. The tables are a function of the records table, which the stream writes exactly
once, so a restarted follow computes the same tables: exactly once by construction.

Cost. A refresh reads the records table (Parquet: no decoding of the log) once, persists it,
and runs every job on it: linear in the records so far, like a one-off replay minus the
decoding. It runs when the stream has committed records newer than the current tables: the
first at once if there are no tables yet and the run does not end with a refresh of its own
(as ``--until-offset`` does), else one interval after the start; then at most every
``interval_s`` (``--refresh-interval``, default 30 s) and never sooner than its last duration
after it ended, so refreshes take at most half of the time whatever the log's size (the stream
keeps the other half: it appends only the new records). The tables lag the records table by
up to one interval plus one refresh. Most of a refresh on a small log is Spark's cost per job
(about a dozen jobs: 15-60 s for a few hundred records on 2 cores at load averages of 10-20);
the records' share grows with the log.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

__all__ = [
    "CURRENT",
    "FRESHNESS",
    "TABLES",
    "TABLE_NAMES",
    "Published",
    "TableRefresher",
    "current_freshness",
    "prepare_out",
]

TABLES = "_tables"
CURRENT = "current"
_CURRENT_TMP = ".current.tmp"
FRESHNESS = "_metaquorum_freshness.json"
# Every table a one-off replay writes (quorum.analytics.replay.write_tables), in its order.
TABLE_NAMES = (
    "topic_lifecycle",
    "name_reuse",
    "partitions_per_broker_over_time",
    "leadership_timeline",
    "partition_elections",
    "broker_events",
    "state_as_of",
    "acls_as_of",
    "voters_as_of",
)
# The report and the plots it can embed (each link dangles while its plot has no data).
REPORT_FILES = (
    "report.md",
    "topics_alive.png",
    "partitions_per_broker.png",
    "leadership_timeline.png",
)
# A refresh that took d seconds is not followed by another for BACKOFF * d seconds.
_BACKOFF = 1.0
_JOB_GROUP = "metaquorum-follow-tables"


class OutError(ValueError):
    """``--out`` holds something ``--follow`` would have to overwrite."""


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    """fsync every file, then every directory (deepest first) under ``root`` and ``root``."""
    for directory, _, files in os.walk(root, topdown=False):
        for name in files:
            fd = os.open(os.path.join(directory, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(directory))


def _write_json(path: Path, value: object) -> None:
    """Write temp, fsync, rename, fsync the directory."""
    temp = path.with_name(f".{path.name}.tmp")
    with temp.open("w") as sink:
        json.dump(value, sink, indent=1)
        sink.write("\n")
        sink.flush()
        os.fsync(sink.fileno())
    os.replace(temp, path)
    _fsync_dir(path.parent)


def prepare_out(out: Path) -> None:
    """Make the fixed links (``OUT/<table>`` -> ``current/<table>``, the report's files) and
    remove what a stopped or crashed refresh left: every version ``current`` does not point to,
    a half-made ``.current.tmp``. Raises ``OutError`` if a table's name is taken by something
    else (a one-off replay's output in the same directory)."""
    for name in (*TABLE_NAMES, *REPORT_FILES):
        link = out / name
        target = f"{CURRENT}/{name}"
        if link.is_symlink() and os.readlink(link) == target:
            continue
        if link.exists() or link.is_symlink():
            raise OutError(
                f"{link} exists and is not --follow's link to {target} (a one-off replay's "
                "output?): give --follow an --out of its own, or remove it"
            )
    versions = out / TABLES
    versions.mkdir(parents=True, exist_ok=True)
    for name in (*TABLE_NAMES, *REPORT_FILES):
        if not (out / name).is_symlink():
            (out / name).symlink_to(f"{CURRENT}/{name}")
    (out / _CURRENT_TMP).unlink(missing_ok=True)
    keep = os.readlink(out / CURRENT) if (out / CURRENT).is_symlink() else None
    for version in versions.iterdir():
        if keep is None or f"{TABLES}/{version.name}" != keep:
            shutil.rmtree(version)
    _fsync_dir(out)


@dataclass(frozen=True, slots=True)
class Published:
    """What ``current`` holds: the tables reflect the records at offsets up to ``up_to_offset``
    (``records`` of them), refreshed at ``refreshed_at`` (UTC, ISO 8601) in ``seconds``."""

    up_to_offset: int
    records: int
    refreshed_at: str
    seconds: float
    version: str


def current_freshness(out: Path) -> Published | None:
    """What ``OUT/current`` reflects (None: no tables yet)."""
    try:
        text = (out / CURRENT / FRESHNESS).read_text()
    except FileNotFoundError:
        return None
    value = json.loads(text)
    return Published(
        up_to_offset=int(value["up_to_offset"]),
        records=int(value["records"]),
        refreshed_at=str(value["refreshed_at"]),
        seconds=float(value["seconds"]),
        version=str(value["version"]),
    )


class TableRefresher:
    """Refreshes the tables of ``out`` from ``out/records`` (see the module docstring), in a
    thread of its own (``start``/``stop``) or on demand (``refresh``)."""

    def __init__(
        self,
        spark: Any,
        out: Path,
        log_dir: Path,
        committed: Any,
        *,
        caught_up: Any = None,
        final_refresh: bool = False,
        interval_s: float,
        stdout: TextIO,
    ) -> None:
        self.spark = spark
        self.out = out
        self.log_dir = log_dir
        self.committed = committed  # () -> the stream's next offset, or None
        # () -> whether the stream has run its first micro-batch (which reads everything the
        # log holds): no refresh before, so a restart far behind does not first compute
        # tables of the records it already had.
        self.caught_up = caught_up or (lambda: True)
        self.final_refresh = final_refresh
        self.interval_s = interval_s
        self.stdout = stdout
        self.published = current_freshness(out)
        self.refreshes = 0  # published by this refresher
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="follow-tables", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread; a refresh in flight is cancelled (its version is removed on the
        next start: ``current`` still points to the last complete one)."""
        self._stop.set()
        if self._thread.is_alive():
            self.spark.sparkContext.cancelJobGroup(_JOB_GROUP)
            self._thread.join(timeout=120)
        current = self.published.version if self.published is not None else ""
        for version in (self.out / TABLES).iterdir():
            if version.name > current:  # the abandoned refresh's
                shutil.rmtree(version, ignore_errors=True)

    def behind(self) -> bool:
        """Whether the stream has committed records the tables do not reflect yet."""
        committed = self.committed()
        published = -1 if self.published is None else self.published.up_to_offset
        return committed is not None and committed - 1 > published

    def _run(self) -> None:
        self.spark.sparkContext.setJobGroup(_JOB_GROUP, "replay --follow tables", True)
        # At once when there are no tables yet; after an interval when a restart finds some,
        # or when the run ends with a refresh of its own (--until-offset): the stream catches
        # up meanwhile, and the refresh then covers what it read.
        delay = 0.0 if self.published is None and not self.final_refresh else self.interval_s
        while not self._stop.wait(delay):
            delay = 0.2
            if not self.caught_up() or not self.behind():
                continue
            try:
                published = self.refresh()
            except Exception as exc:  # reported by the command unless it is stopping
                if not self._stop.is_set():
                    self.error = exc
                return
            if published is not None:
                delay = max(self.interval_s, _BACKOFF * published.seconds)

    def refresh(self) -> Published | None:
        """Recompute every table from the committed records and publish them; None when the
        records table has no row yet."""
        from pyspark import StorageLevel  # noqa: PLC0415
        from pyspark.sql import functions as F  # noqa: PLC0415

        from quorum.analytics.jobs import Coverage, StateNotAvailableError  # noqa: PLC0415
        from quorum.analytics.replay import write_tables  # noqa: PLC0415

        started = time.perf_counter()
        table = self.out / "records"
        if not (table / "_spark_metadata").is_dir():
            return None
        records = self.spark.read.parquet(str(table)).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            counted = records.agg(
                F.count("*").alias("records"),
                F.min("offset").alias("first"),
                F.max("offset").alias("last"),
            ).collect()[0]
            if not counted["records"]:
                return None
            first, last = int(counted["first"]), int(counted["last"])
            coverage = Coverage.from_parts(first, [])
            try:
                as_of: int | None = last
                coverage.base_for(last)
            except StateNotAvailableError:
                as_of = None  # a stream started after retention: no image tables
            version = f"{last:020d}-{int(time.time() * 1000)}"
            root = self.out / TABLES / version
            root.mkdir(parents=True)
            seconds: list[tuple[str, float]] = []

            @contextmanager
            def stage(name: str) -> Iterator[None]:
                begun = time.perf_counter()
                yield
                seconds.append((name, time.perf_counter() - begun))

            write_tables(
                self.spark,
                records,
                coverage,
                root,
                self.log_dir,
                totals={"records": counted["records"], "first": first, "last": last},
                as_of=as_of,
                stage=stage,
                stage_seconds=seconds,
            )
        finally:
            records.unpersist()
        published = Published(
            up_to_offset=last,
            records=int(counted["records"]),
            refreshed_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            seconds=round(time.perf_counter() - started, 3),
            version=version,
        )
        fresh = {
            "up_to_offset": published.up_to_offset,
            "records": published.records,
            "refreshed_at": published.refreshed_at,
            "seconds": published.seconds,
            "version": version,
        }
        for name in TABLE_NAMES:
            if (root / name).is_dir():
                _write_json(root / name / FRESHNESS, {"table": name, **fresh})
        _write_json(root / FRESHNESS, fresh)
        _fsync_tree(root)
        self._swap(version)
        self.published = published
        self.refreshes += 1
        print(
            f"    tables: up to offset {last:,} ({published.records:,} records, refreshed in "
            f"{published.seconds:.1f} s; {self.out / CURRENT} -> {TABLES}/{version})",
            file=self.stdout,
            flush=True,
        )
        return published

    def _swap(self, version: str) -> None:
        """Point ``current`` at ``version`` (atomically), then drop all but it and the one
        before."""
        temp = self.out / _CURRENT_TMP
        temp.unlink(missing_ok=True)
        temp.symlink_to(f"{TABLES}/{version}")
        os.replace(temp, self.out / CURRENT)
        _fsync_dir(self.out)
        versions = sorted(p.name for p in (self.out / TABLES).iterdir())
        older = [v for v in versions if v < version]
        keep = {version, *older[-1:]}
        for name in versions:
            if name not in keep:
                shutil.rmtree(self.out / TABLES / name, ignore_errors=True)
