"""The broker's partition directories: scan, execute a ``ReconcilePlan``, delete when due.

This is the only module that touches partition directories; ``broker/reconcile.py`` decides
what to do. Every fsync goes through ``quorum.storage.fsutil``. The calls block (renames,
fsyncs, ``rmtree``): the broker runs them in a worker thread, one at a time.

Durability, step by step (docs/invariants.md I11d, F16, F22):

* **create**: ``mkdir {topic}-{p}.tmp-{token}``; write ``partition.metadata`` into it through
  ``write_file_atomically`` (temp file, fsync, rename, fsync of the build dir); rename the build
  dir to ``{topic}-{p}`` (refusing to replace anything); fsync the log dir. A crash leaves either
  nothing, a ``.tmp-`` build dir (moved aside by the next FULL plan), or the finished partition.
* **move aside**: tell the partition logs (``MoveAsideHook``, ``broker/log/manager.py``) so the
  directory's log is closed and never opened there again, rename into ``deleting/``, fsync the
  log dir and ``deleting/``, and only then
  record the due time in ``deleting/pending.json`` (written atomically), then log
  ``partition_moved_aside`` at WARN with the due time. A crash before the journal write leaves
  an entry without a due time: the next plan schedules it ``delete.topic.delay.ms`` later.
* **delete**: only entries that ``pending.json`` says are due (so their move was durable
  before), ``rmtree`` without following symlinks, fsync ``deleting/``, rewrite the journal.

Due times are wall-clock milliseconds (they must survive a reboot, which resets monotonic
clocks); a clock set far forward deletes early, which is why the delay is long.

Errors: a log dir whose root or ``deleting/`` cannot be listed raises ``LogDirUnavailableError``
from ``scan`` (planning against a partial view could recreate partitions that still exist, so
the broker must not reconcile; Kafka also stops a broker whose log dir failed when it cannot
move its replicas). An entry that cannot be read (permission denied) is reported and left
alone. An action that fails (ENOSPC, EACCES, EEXIST) is logged at ERROR, listed in
``ExecuteResult.failures`` and leaves no half state; the others go on. EIO is re-raised: after
a failed fsync nothing about the directory can be trusted (fsyncgate), so the broker crashes.

Reading ``partition.metadata`` (docs/architecture.md#brokers): every read goes through one seam,
``LogDirs(read_file=...)`` (``read_partition_metadata_bytes`` by default), which tests replace.
What the read finds decides the entry's state: a missing file (``METADATA_MISSING``), a file
that does not parse, a symlink or not a regular file (``METADATA_UNREADABLE``: corrupt content,
which the plan never moves aside under an assigned name), permission denied
(``INACCESSIBLE``). Any other ``OSError`` (EIO, EMFILE, ENFILE, ENOMEM, ...) says nothing about
the file: the read is retried ``PARTITION_METADATA_READ_ATTEMPTS_MAX`` times,
``PARTITION_METADATA_READ_BACKOFF_MS`` apart, and if it still fails ``scan`` raises
``PartitionMetadataReadError`` naming the path and errno, and the broker stops (exit 1). An I/O
error never becomes a state, so it can never make a live partition look stale.

A missing ``partition.metadata`` under an assigned name is written (``write_metadata``):
``write_file_atomically`` (temp file, fsync, rename, fsync of the partition dir), refusing to
replace a file that appeared meanwhile.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import shutil
import stat
import string
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final, NamedTuple, Protocol

import structlog

from broker import partition_metadata
from broker.partition_metadata import PARTITION_METADATA_FILE, InvalidPartitionMetadata
from broker.plan_report import describe_plan, iso_time  # noqa: F401 - describe_plan re-exported
from broker.reconcile import (
    BUILD_TOKEN_CHARS,
    DELETING_DIR,
    RESERVED_ENTRY_NAMES,
    Create,
    Delete,
    DiskSnapshot,
    EntryState,
    LiveCopy,
    LocalPartition,
    MoveAside,
    PendingDeletion,
    ReconcileMode,
    ReconcilePlan,
    ScheduleDeletion,
    WritePartitionMetadata,
    build_dir_name,
    format_partition_dir,
    parse_partition_dir,
    plan_reconciliation,
    unique_deleting_name,
)
from quorum.ids import InvalidUuidError, Uuid
from quorum.limits import PARTITION_METADATA_READ_ATTEMPTS_MAX, PARTITION_METADATA_READ_BACKOFF_MS
from quorum.storage.fsutil import (
    ensure_directory,
    fsync_directory,
    tmp_path_for,
    write_file_atomically,
)

PENDING_JOURNAL: Final = "pending.json"
PENDING_JOURNAL_VERSION: Final = 0
# A journal entry is ~200 bytes; this allows ~300,000 pending deletions and refuses junk.
PENDING_JOURNAL_BYTES_MAX: Final = 64 * 1024 * 1024
PARTITION_DIR_MODE: Final = 0o755
# Build-dir names drawn before giving up; a clash needs 26^10 bad luck or a seeded rng.
BUILD_DIR_ATTEMPTS_MAX: Final = 8

# Named crash points (docs/invariants.md F19/F22). ``LogDirs(failpoint=...)`` is called with each
# name; a test or a FAILPOINTS hook raises or sleeps there.
FAILPOINT_BEFORE_MOVE_ASIDE: Final = "broker_before_move_aside"
FAILPOINT_AFTER_RENAME_BEFORE_DIRFSYNC: Final = "broker_after_rename_before_dirfsync"
FAILPOINT_BEFORE_JOURNAL_WRITE: Final = "broker_before_journal_write"
FAILPOINT_BEFORE_CREATE_RENAME: Final = "broker_before_create_rename"
FAILPOINT_BEFORE_DELETE: Final = "broker_before_delete"

_METADATA_OPEN_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_DIR_OPEN_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class MoveAsideHook(Protocol):
    """Who must let go of a partition directory before it moves to ``deleting/`` (the
    partition logs, ``broker.log.manager.LogManager``): ``before_move_aside(path)`` runs before
    the rename (it may raise ``OSError``: the move is then skipped, as any failed move), and
    ``after_move_aside(path)`` after it, whether it succeeded or not."""

    def before_move_aside(self, path: Path) -> None: ...

    def after_move_aside(self, path: Path) -> None: ...


class _NoHook:
    def before_move_aside(self, path: Path) -> None:
        del path

    def after_move_aside(self, path: Path) -> None:
        del path


class LogDirUnavailableError(Exception):
    """A log dir (or its ``deleting/``) cannot be listed or is not a directory."""

    def __init__(self, message: str, *, log_dir: Path) -> None:
        super().__init__(message)
        self.log_dir = log_dir


class PartitionMetadataReadError(LogDirUnavailableError):
    """Reading a partition's ``partition.metadata`` kept failing with an I/O error: the broker
    must stop rather than decide anything about the partition."""

    def __init__(self, directory: Path, error: OSError, attempts: int) -> None:
        self.path = directory / PARTITION_METADATA_FILE
        self.errno = error.errno
        name = errno.errorcode.get(error.errno or 0, "?")
        super().__init__(
            f"cannot read {self.path}: {error.strerror or error} (errno {error.errno} {name}), "
            f"{attempts} attempts. The broker stops rather than guess what the directory holds "
            "(it is never moved aside on a read error); check the disk (dmesg, SMART) and the "
            "process limits (ulimit -n), then restart the broker.",
            log_dir=directory.parent,
        )


class Scan(NamedTuple):
    on_disk: tuple[LocalPartition, ...]
    pending_deletions: tuple[PendingDeletion, ...]
    # A partial scan of several log dirs: the partition directories of each it did not read
    # (for placement). None otherwise.
    unread_partitions: dict[str, int] | None = None


def scope_dir_names(scope: Mapping[tuple[Uuid, int], str]) -> dict[str, tuple[Uuid, int]]:
    """The directory name of each partition of a scope (none for an illegal name: the plan
    reports it)."""
    names = {}
    for key, topic_name in scope.items():
        with contextlib.suppress(ValueError):
            names[format_partition_dir(topic_name, key[1])] = key
    return names


@dataclass(frozen=True, slots=True)
class Failure:
    """One action of a plan that failed and was skipped."""

    action: str  # "create" | "move_aside" | "schedule" | "delete" | "write_metadata"
    path: str
    error: str


@dataclass(frozen=True, slots=True)
class ExecuteResult:
    created: tuple[Create, ...]
    moved: tuple[MoveAside, ...]
    scheduled: tuple[ScheduleDeletion, ...]
    deleted: tuple[Delete, ...]
    failures: tuple[Failure, ...]
    metadata_written: tuple[WritePartitionMetadata, ...] = ()

    def unfinished(self, plan: ReconcilePlan) -> set[str]:
        """Names of the entries whose planned create, move or metadata write failed (for a
        scoped pass to carry them into the next one)."""
        done = {c.dir_name for c in self.created} | {m.dir_name for m in self.moved}
        done |= {w.dir_name for w in self.metadata_written}
        planned = {c.dir_name for c in plan.creates} | {m.dir_name for m in plan.move_aside}
        planned |= {w.dir_name for w in plan.write_metadata}
        return planned - done


def _no_failpoint(name: str) -> None:
    del name


class LogDirs:
    """The partition directories of one broker (``log.dirs``)."""

    def __init__(
        self,
        log_dirs: Sequence[Path],
        logger: Any = None,
        *,
        rng: random.Random | None = None,
        failpoint: Callable[[str], None] = _no_failpoint,
        read_file: Callable[[Path], bytes] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        on_move_aside: MoveAsideHook | None = None,
    ) -> None:
        assert log_dirs, "a broker needs at least one log dir"
        self._on_move_aside: MoveAsideHook = (
            on_move_aside if on_move_aside is not None else _NoHook()
        )
        self._log_dirs = tuple(Path(d) for d in log_dirs)
        assert len({str(d) for d in self._log_dirs}) == len(self._log_dirs), log_dirs
        self._by_name = {str(d): d for d in self._log_dirs}
        self._log = logger if logger is not None else structlog.get_logger("broker.logdirs")
        self._rng = rng if rng is not None else random.SystemRandom()
        self._failpoint = failpoint
        # The one I/O seam of partition.metadata reads, and the retry backoff's sleep.
        self._read_file = read_file if read_file is not None else read_partition_metadata_bytes
        self._sleep = sleep
        # Everything in each deleting/, by (log dir, name); delete_at_ms None = not journaled.
        self._pending: dict[tuple[str, str], PendingDeletion] = {}
        self._scanned = False

    @property
    def log_dir_names(self) -> tuple[str, ...]:
        """The log dirs as the plan names them (``LocalPartition.log_dir``)."""
        return tuple(self._by_name)

    # ----- scan -------------------------------------------------------------------------------

    def scan(self, names: Collection[str] | None = None) -> Scan:
        """What is on disk now: every entry of each log dir, or only the entries called one of
        ``names`` (each log dir is still listed, so a lost one is noticed). Never follows
        symlinks, never modifies anything."""
        on_disk: list[LocalPartition] = []
        pending: dict[tuple[str, str], PendingDeletion] = {}
        # Placement needs the counts of what a partial scan skips, with several log dirs only.
        unread: dict[str, int] | None = {} if names and len(self._log_dirs) > 1 else None
        for log_dir in self._log_dirs:
            listed = _list_log_dir(log_dir)
            if names is not None:
                if unread is not None:
                    unread[str(log_dir)] = sum(
                        1 for n in listed if n not in names and parse_partition_dir(n) is not None
                    )
                present = set(listed)
                listed = sorted(name for name in names if name in present)
            for name in listed:
                if name in RESERVED_ENTRY_NAMES:
                    continue
                entry = self._scan_entry(log_dir, name)
                if entry is not None:
                    on_disk.append(entry)
            for deletion in self._scan_deleting(log_dir):
                pending[(deletion.log_dir, deletion.name)] = deletion
        self._pending = pending
        self._scanned = True
        return Scan(tuple(on_disk), tuple(pending.values()), unread)

    def _scan_entry(self, log_dir: Path, name: str) -> LocalPartition | None:
        path = log_dir / name
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None  # removed while we listed
        except OSError as exc:
            return self._inaccessible(log_dir, name, exc)
        if not stat.S_ISDIR(st.st_mode):
            if parse_partition_dir(name) is None:
                return None  # meta.properties, checkpoint files...: not partitions
            return LocalPartition(
                str(log_dir),
                name,
                EntryState.NOT_A_DIRECTORY,
                detail=f"a {_kind(st.st_mode)}, not a directory",
            )
        state, topic_id, detail = self._read_metadata(path)
        if state is EntryState.INACCESSIBLE:
            self._log.warning("partition_dir_inaccessible", dir=str(path), error=detail)
        elif state is EntryState.METADATA_UNREADABLE:
            self._log.warning("partition_metadata_unreadable", dir=str(path), error=detail)
        return LocalPartition(str(log_dir), name, state, topic_id, detail)

    def _read_metadata(self, path: Path) -> tuple[EntryState, Uuid | None, str]:
        """``read_partition_metadata`` with retries on I/O errors; raises
        ``PartitionMetadataReadError`` when they persist."""
        for attempt in range(1, PARTITION_METADATA_READ_ATTEMPTS_MAX + 1):
            try:
                return read_partition_metadata(path, self._read_file)
            except OSError as exc:
                if attempt == PARTITION_METADATA_READ_ATTEMPTS_MAX:
                    error = PartitionMetadataReadError(path, exc, attempt)
                    self._log.error(
                        "partition_metadata_read_failed",
                        path=str(error.path),
                        errno=exc.errno,
                        error=str(exc),
                        attempts=attempt,
                    )
                    raise error from exc
                self._log.warning(
                    "partition_metadata_read_retried",
                    path=str(path / PARTITION_METADATA_FILE),
                    errno=exc.errno,
                    error=str(exc),
                    attempt=attempt,
                )
                self._sleep(PARTITION_METADATA_READ_BACKOFF_MS / 1000)
        raise AssertionError("unreachable")  # pragma: no cover

    def _inaccessible(self, log_dir: Path, name: str, exc: OSError) -> LocalPartition:
        self._log.warning("partition_dir_inaccessible", dir=str(log_dir / name), error=str(exc))
        return LocalPartition(str(log_dir), name, EntryState.INACCESSIBLE, detail=str(exc))

    def _scan_deleting(self, log_dir: Path) -> list[PendingDeletion]:
        deleting = log_dir / DELETING_DIR
        try:
            st = os.lstat(deleting)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise LogDirUnavailableError(f"cannot read {deleting}: {exc}", log_dir=log_dir) from exc
        if not stat.S_ISDIR(st.st_mode):
            raise LogDirUnavailableError(
                f"{deleting} is a {_kind(st.st_mode)}, not a directory; stale partitions are "
                "moved there, so move it out of the way",
                log_dir=log_dir,
            )
        journal = self._read_journal(log_dir)
        names = _list_log_dir(deleting)
        skip = {PENDING_JOURNAL, tmp_path_for(Path(PENDING_JOURNAL)).name}
        found: list[PendingDeletion] = []
        for name in names:
            if name in skip:
                continue
            known = journal.get(name)
            size = tree_bytes(deleting / name)
            if known is None:
                found.append(PendingDeletion(str(log_dir), name, None, size_bytes=size))
            else:
                found.append(replace(known, size_bytes=size))
        return found

    def _read_journal(self, log_dir: Path) -> dict[str, PendingDeletion]:
        path = log_dir / DELETING_DIR / PENDING_JOURNAL
        try:
            fd = os.open(path, _METADATA_OPEN_FLAGS)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            self._log.warning(
                "pending_deletions_journal_unreadable", path=str(path), error=str(exc)
            )
            return {}
        try:
            data = _read_regular_file(fd, PENDING_JOURNAL_BYTES_MAX)
        except (OSError, ValueError) as exc:
            self._log.warning(
                "pending_deletions_journal_unreadable", path=str(path), error=str(exc)
            )
            return {}
        finally:
            os.close(fd)
        try:
            return decode_journal(str(log_dir), data)
        except ValueError as exc:
            # Safe: every entry is then rescheduled a full delay from now, never deleted early.
            self._log.warning(
                "pending_deletions_journal_unreadable",
                path=str(path),
                error=str(exc),
                consequence="every entry of deleting/ is rescheduled",
            )
            return {}

    # ----- plan -------------------------------------------------------------------------------

    def plan(
        self,
        *,
        assigned: Mapping[tuple[Uuid, int], str],
        mode: ReconcileMode,
        now_ms: int,
        delete_delay_ms: int,
        removed: Collection[tuple[Uuid, int]] = frozenset(),
        scope: Mapping[tuple[Uuid, int], str] | None = None,
    ) -> ReconcilePlan:
        """Scan, then ``plan_reconciliation`` against the scan (a dry run: nothing changes).

        ``scope`` (INCREMENTAL only): the partitions a delta touched, (topic id, partition) ->
        topic name, ``assigned`` and ``removed`` among them. Only the entries named like them
        are read, so a pass costs what the delta holds, not what the broker holds (the FULL
        pass after catch-up has compared everything; the directories the broker makes after
        it are the plan's own)."""
        names = None
        if scope is not None:
            assert mode is ReconcileMode.INCREMENTAL, "a FULL plan compares every entry"
            assert set(assigned) <= set(scope), "a scoped plan's assignments are in its scope"
            names = set(scope_dir_names(scope))
        scan = self.scan(names)
        return plan_reconciliation(
            assigned=assigned,
            on_disk=scan.on_disk,
            pending_deletions=scan.pending_deletions,
            mode=mode,
            log_dirs=self.log_dir_names,
            now_ms=now_ms,
            delete_delay_ms=delete_delay_ms,
            removed=removed,
            partitions_elsewhere=scan.unread_partitions,
        )

    def reconcile(
        self,
        *,
        assigned: Mapping[tuple[Uuid, int], str],
        mode: ReconcileMode,
        now_ms: int,
        delete_delay_ms: int,
        removed: Collection[tuple[Uuid, int]] = frozenset(),
        scope: Mapping[tuple[Uuid, int], str] | None = None,
    ) -> tuple[ReconcilePlan, ExecuteResult]:
        """Scan, plan and execute (``scope``: see ``plan``)."""
        plan = self.plan(
            assigned=assigned,
            mode=mode,
            now_ms=now_ms,
            delete_delay_ms=delete_delay_ms,
            removed=removed,
            scope=scope,
        )
        return plan, self.execute(plan)

    # ----- execute ----------------------------------------------------------------------------

    def execute(self, plan: ReconcilePlan) -> ExecuteResult:
        """Carry out ``plan`` (made from this object's latest scan), in the plan's order."""
        assert self._scanned, "scan() before execute(): the plan must describe this disk"
        planned_dirs = {m.log_dir for m in plan.move_aside} | {c.log_dir for c in plan.creates}
        planned_dirs |= {s.log_dir for s in plan.schedules} | {d.log_dir for d in plan.deletes}
        planned_dirs |= {w.log_dir for w in plan.write_metadata}
        assert planned_dirs <= set(self._by_name), f"plan names unknown log dirs {planned_dirs}"
        failures: list[Failure] = []
        moved: list[MoveAside] = []
        scheduled: list[ScheduleDeletion] = []
        for log_dir in self._log_dirs:
            moves = [m for m in plan.move_aside if m.log_dir == str(log_dir)]
            schedules = [s for s in plan.schedules if s.log_dir == str(log_dir)]
            if moves or schedules:
                done, done_schedules = self._move_aside(log_dir, moves, schedules, failures)
                moved += done
                scheduled += done_schedules
        written = self._write_metadata(plan.write_metadata, failures)
        created = self._create(plan.creates, failures)
        deleted = self._delete(plan, failures)
        for conflict in plan.conflicts:
            self._log.error(
                "reconcile_conflict",
                dir=f"{conflict.log_dir}/{conflict.dir_name}",
                message=conflict.message,
            )
        return ExecuteResult(
            created=tuple(created),
            moved=tuple(moved),
            scheduled=tuple(scheduled),
            deleted=tuple(deleted),
            failures=tuple(failures),
            metadata_written=tuple(written),
        )

    def _move_aside(
        self,
        log_dir: Path,
        moves: Sequence[MoveAside],
        schedules: Sequence[ScheduleDeletion],
        failures: list[Failure],
    ) -> tuple[list[MoveAside], list[ScheduleDeletion]]:
        deleting = log_dir / DELETING_DIR
        ensure_directory(deleting)
        key = str(log_dir)
        done: list[tuple[MoveAside, PendingDeletion]] = []
        for move in moves:
            source = log_dir / move.dir_name
            try:
                self._failpoint(FAILPOINT_BEFORE_MOVE_ASIDE)
                # The plan chose a free name from the scan; if something appeared since, take
                # the next free one rather than fail.
                taken = set(os.listdir(deleting)) | {n for (d, n) in self._pending if d == key}
                destination = unique_deleting_name(move.destination, taken)
                size = tree_bytes(source)
                self._on_move_aside.before_move_aside(source)
                try:
                    _rename_no_replace(source, deleting / destination)
                finally:
                    self._on_move_aside.after_move_aside(source)
            except OSError as exc:
                _reraise_eio(exc)
                self._fail(failures, "move_aside", source, exc)
                continue
            deletion = PendingDeletion(
                log_dir=key,
                name=destination,
                delete_at_ms=None,  # not yet: the journal entry follows the fsyncs
                topic_id=move.topic_id,
                partition=move.partition,
                reason=move.reason.value,
                source=move.dir_name,
                size_bytes=size,
            )
            self._pending[(key, destination)] = deletion
            done.append((replace(move, destination=destination), deletion))
        due = {
            s.name: s.delete_at_ms
            for s in schedules
            if (key, s.name) in self._pending and self._pending[(key, s.name)].delete_at_ms is None
        }
        if not done and not due:
            return [], []
        self._failpoint(FAILPOINT_AFTER_RENAME_BEFORE_DIRFSYNC)
        fsync_directory(log_dir)
        fsync_directory(deleting)
        # The moves are durable from here: only now may they get a due time (I11d).
        updates = {d.name: replace(d, delete_at_ms=m.delete_at_ms) for m, d in done}
        updates.update(
            {name: replace(self._pending[(key, name)], delete_at_ms=at) for name, at in due.items()}
        )
        try:
            self._failpoint(FAILPOINT_BEFORE_JOURNAL_WRITE)
            self._write_journal(log_dir, updates)
        except OSError as exc:
            _reraise_eio(exc)
            self._fail(failures, "schedule", deleting / PENDING_JOURNAL, exc)
            # The entries stay without a due time: the next plan schedules them again.
            return [m for m, _ in done], []
        for move, _ in done:
            self._log.warning(
                "partition_moved_aside",
                dir=str(log_dir / move.dir_name),
                destination=str(deleting / move.destination),
                topic_id=str(move.topic_id) if move.topic_id is not None else None,
                partition=move.partition,
                reason=move.reason.value,
                delete_at=iso_time(move.delete_at_ms),
                delete_at_ms=move.delete_at_ms,
            )
        scheduled = [s for s in schedules if s.name in due]
        for schedule in scheduled:
            self._log.warning(
                "pending_deletion_scheduled",
                dir=str(deleting / schedule.name),
                delete_at=iso_time(schedule.delete_at_ms),
                delete_at_ms=schedule.delete_at_ms,
                why="found in deleting/ without a due time (a crash after the move?)",
            )
        return [m for m, _ in done], scheduled

    def _write_journal(self, log_dir: Path, updates: Mapping[str, PendingDeletion]) -> None:
        """Write ``pending.json`` with every journaled entry plus ``updates``, then adopt it."""
        key = str(log_dir)
        entries = {
            name: deletion
            for (d, name), deletion in self._pending.items()
            if d == key and deletion.delete_at_ms is not None
        }
        entries.update(updates)
        write_file_atomically(
            log_dir / DELETING_DIR / PENDING_JOURNAL, encode_journal(entries.values())
        )
        for name, deletion in updates.items():
            self._pending[(key, name)] = deletion

    def _write_metadata(
        self, writes: Sequence[WritePartitionMetadata], failures: list[Failure]
    ) -> list[WritePartitionMetadata]:
        """Write the missing ``partition.metadata`` of directories under assigned names."""
        done: list[WritePartitionMetadata] = []
        for write in writes:
            directory = self._by_name[write.log_dir] / write.dir_name
            path = directory / PARTITION_METADATA_FILE
            try:
                st = os.lstat(directory)
                if not stat.S_ISDIR(st.st_mode):
                    raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(directory))
                if os.path.lexists(path):
                    raise FileExistsError(errno.EEXIST, "appeared since the scan", str(path))
                write_file_atomically(path, partition_metadata.render(write.topic_id))
            except OSError as exc:
                _reraise_eio(exc)
                self._fail(failures, "write_metadata", path, exc)
                continue
            done.append(write)
            self._log.warning(
                "partition_metadata_written",
                dir=str(directory),
                topic_id=str(write.topic_id),
                partition=write.partition,
                why="the directory of an assigned partition had no partition.metadata",
            )
        return done

    def _create(self, creates: Sequence[Create], failures: list[Failure]) -> list[Create]:
        created: list[Create] = []
        touched: dict[str, Path] = {}
        for create in creates:
            log_dir = self._by_name[create.log_dir]
            final = log_dir / create.dir_name
            build: Path | None = None
            try:
                if os.path.lexists(final):
                    raise FileExistsError(errno.EEXIST, "already exists", str(final))
                build = self._make_build_dir(log_dir, create.dir_name)
                write_file_atomically(
                    build / PARTITION_METADATA_FILE, partition_metadata.render(create.topic_id)
                )
                self._failpoint(FAILPOINT_BEFORE_CREATE_RENAME)
                _rename_no_replace(build, final)
            except OSError as exc:
                _reraise_eio(exc)
                self._fail(failures, "create", final, exc)
                if build is not None:
                    # The build dir this call made, never a partition: clean up now if we
                    # can, else the next FULL plan moves it aside.
                    shutil.rmtree(build, ignore_errors=True)
                continue
            touched[create.log_dir] = log_dir
            created.append(create)
        for log_dir in touched.values():
            fsync_directory(log_dir)
        for create in created:
            self._log.info(
                "partition_created",
                dir=str(self._by_name[create.log_dir] / create.dir_name),
                topic=create.topic_name,
                topic_id=str(create.topic_id),
                partition=create.partition,
            )
        return created

    def _make_build_dir(self, log_dir: Path, final_name: str) -> Path:
        """A new, empty ``{final_name}.tmp-{token}`` (another token if one is taken, e.g. by
        a build dir a crash left behind)."""
        for attempt in range(BUILD_DIR_ATTEMPTS_MAX):
            letters = string.ascii_lowercase
            token = "".join(self._rng.choice(letters) for _ in range(BUILD_TOKEN_CHARS))
            build = log_dir / build_dir_name(final_name, token)
            try:
                os.mkdir(build, PARTITION_DIR_MODE)
            except FileExistsError:
                if attempt + 1 == BUILD_DIR_ATTEMPTS_MAX:
                    raise
                continue
            return build
        raise AssertionError("unreachable")  # pragma: no cover

    def _delete(self, plan: ReconcilePlan, failures: list[Failure]) -> list[Delete]:
        deleted: list[Delete] = []
        for log_dir in self._log_dirs:
            key = str(log_dir)
            deleting = log_dir / DELETING_DIR
            done: list[tuple[Delete, PendingDeletion]] = []
            for delete in (d for d in plan.deletes if d.log_dir == key):
                pending = self._pending.get((key, delete.name))
                if pending is None:
                    continue  # already gone (the plan ran twice)
                # I11d: only journaled entries, whose move was fsynced before the journal write.
                assert pending.delete_at_ms is not None, f"I11d: {pending} has no due time"
                assert pending.delete_at_ms <= plan.now_ms, f"I11d: {pending} is not due"
                path = deleting / delete.name
                try:
                    self._failpoint(FAILPOINT_BEFORE_DELETE)
                    _remove_tree(path)
                except OSError as exc:
                    _reraise_eio(exc)
                    self._fail(failures, "delete", path, exc)
                    continue
                done.append((delete, pending))
            if not done:
                continue
            fsync_directory(deleting)
            for delete, _ in done:
                del self._pending[(key, delete.name)]
            try:
                self._write_journal(log_dir, {})
            except OSError as exc:
                # Harmless: a journal entry without its directory is dropped on the next scan.
                _reraise_eio(exc)
                self._fail(failures, "delete", deleting / PENDING_JOURNAL, exc)
            for delete, pending in done:
                self._log.info(
                    "partition_deleted",
                    dir=str(deleting / delete.name),
                    source=pending.source,
                    topic_id=str(pending.topic_id) if pending.topic_id is not None else None,
                    partition=pending.partition,
                    bytes=pending.size_bytes,
                    due_at=iso_time(delete.delete_at_ms),
                )
            deleted += [d for d, _ in done]
        return deleted

    def _fail(self, failures: list[Failure], action: str, path: Path, exc: OSError) -> None:
        failures.append(Failure(action, str(path), str(exc)))
        self._log.error(f"partition_{action}_failed", dir=str(path), error=str(exc))

    # ----- views ------------------------------------------------------------------------------

    def pending_deletions(self) -> tuple[PendingDeletion, ...]:
        return tuple(self._pending.values())

    def bytes_pending_deletion(self) -> int:
        """Bytes in every ``deleting/`` (as of the last scan plus moves and deletes since)."""
        return sum(p.size_bytes for p in self._pending.values())

    def next_deletion_due_ms(self) -> int | None:
        """When the next pending deletion falls due (for the broker's timer), or None."""
        due = [p.delete_at_ms for p in self._pending.values() if p.delete_at_ms is not None]
        return min(due, default=None)

    def describe_pending(self) -> list[dict[str, object]]:
        """Every pending deletion, for ``metaquorum broker pending-deletions``."""
        return [
            {
                "log_dir": p.log_dir,
                "dir": f"{DELETING_DIR}/{p.name}",
                "source": p.source or None,
                "topic_id": str(p.topic_id) if p.topic_id is not None else None,
                "partition": p.partition,
                "reason": p.reason or None,
                "delete_at": iso_time(p.delete_at_ms) if p.delete_at_ms is not None else None,
                "delete_at_ms": p.delete_at_ms,
                "bytes": p.size_bytes,
            }
            for p in sorted(self._pending.values(), key=lambda p: (p.log_dir, p.name))
        ]


# ----- the pending-deletions journal ----------------------------------------------------------


def encode_journal(entries: Collection[PendingDeletion]) -> bytes:
    """``deleting/pending.json``: version and one object per journaled entry, sorted."""
    pending: dict[str, dict[str, object]] = {}
    for entry in sorted(entries, key=lambda e: e.name):
        assert entry.delete_at_ms is not None, entry
        pending[entry.name] = {
            "delete_at_ms": entry.delete_at_ms,
            "topic_id": str(entry.topic_id) if entry.topic_id is not None else None,
            "partition": entry.partition,
            "reason": entry.reason,
            "source": entry.source,
        }
    document = {"version": PENDING_JOURNAL_VERSION, "pending": pending}
    # ensure_ascii escapes names that are not UTF-8 (surrogate escapes) and loads restores them.
    return (json.dumps(document, indent=1, sort_keys=True, ensure_ascii=True) + "\n").encode()


def decode_journal(log_dir: str, data: bytes) -> dict[str, PendingDeletion]:
    """Parse ``pending.json``; ``ValueError`` if it is not one this module wrote."""
    try:
        document = json.loads(data.decode("ascii"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"pending.json is not JSON: {exc}") from None
    if not isinstance(document, dict) or document.get("version") != PENDING_JOURNAL_VERSION:
        raise ValueError(f"pending.json is not a version-{PENDING_JOURNAL_VERSION} journal")
    pending = document.get("pending")
    if not isinstance(pending, dict):
        raise ValueError("pending.json has no 'pending' object")
    entries: dict[str, PendingDeletion] = {}
    for name, fields in pending.items():
        if not isinstance(fields, dict):
            raise ValueError(f"pending.json entry {name!r} is not an object")
        delete_at_ms = fields.get("delete_at_ms")
        partition = fields.get("partition")
        topic_id_text = fields.get("topic_id")
        reason = fields.get("reason", "")
        source = fields.get("source", "")
        if type(delete_at_ms) is not int or delete_at_ms < 0:
            raise ValueError(f"pending.json entry {name!r}: bad delete_at_ms {delete_at_ms!r}")
        if partition is not None and (type(partition) is not int or partition < 0):
            raise ValueError(f"pending.json entry {name!r}: bad partition {partition!r}")
        if not isinstance(reason, str) or not isinstance(source, str):
            raise ValueError(f"pending.json entry {name!r}: bad reason or source")
        topic_id: Uuid | None = None
        if topic_id_text is not None:
            try:
                topic_id = Uuid.parse(topic_id_text)
            except InvalidUuidError as exc:
                raise ValueError(f"pending.json entry {name!r}: {exc}") from None
        entries[name] = PendingDeletion(
            log_dir=log_dir,
            name=name,
            delete_at_ms=delete_at_ms,
            topic_id=topic_id,
            partition=partition,
            reason=reason,
            source=source,
        )
    return entries


# ----- the I11 checker's view of the disk ------------------------------------------------------


def snapshot_log_dirs(log_dirs: Sequence[Path]) -> DiskSnapshot:
    """Live partitions and strays of ``log_dirs`` for ``reconcile.i11_violations``.

    Deliberately independent of ``LogDirs.scan`` and of the plan: a live partition is a real
    directory named ``{topic}-{p}`` with a valid ``partition.metadata``; a stray is any other
    directory (except ``deleting``, ``lost+found`` and the metadata log) and any non-directory
    named like a partition.
    """
    live: dict[tuple[Uuid, int], list[LiveCopy]] = {}
    strays: list[str] = []
    for log_dir in log_dirs:
        for name in sorted(os.listdir(log_dir)):
            if name in RESERVED_ENTRY_NAMES:
                continue
            path = log_dir / name
            st = os.lstat(path)
            parsed = parse_partition_dir(name)
            if not stat.S_ISDIR(st.st_mode):
                if parsed is not None:
                    strays.append(str(path))
                continue
            state, topic_id, _ = read_partition_metadata(path)
            if parsed is None or topic_id is None or state is not EntryState.OK:
                strays.append(str(path))
                continue
            copy = LiveCopy(str(path), (st.st_dev, st.st_ino))
            live.setdefault((topic_id, parsed[1]), []).append(copy)
    return DiskSnapshot({k: tuple(v) for k, v in live.items()}, tuple(strays))


# ----- small helpers --------------------------------------------------------------------------


class NotARegularFileError(ValueError):
    """``partition.metadata`` (or the journal) is a directory, a FIFO, a device..."""


def read_partition_metadata_bytes(directory: Path) -> bytes:
    """The bytes of ``directory/partition.metadata`` (at most ``PARTITION_METADATA_BYTES_MAX``
    + 1), without following symlinks: neither ``directory`` nor the file may be one. The one
    I/O seam of ``partition.metadata`` reads (``LogDirs(read_file=...)``). Raises ``OSError``
    (ENOENT: missing; ELOOP: a symlink; EACCES; EIO, EMFILE, ...) or
    ``NotARegularFileError``."""
    dir_fd = os.open(directory, _DIR_OPEN_FLAGS)
    try:
        fd = _open_metadata_file(dir_fd)
        try:
            return _read_regular_file(fd, partition_metadata.PARTITION_METADATA_BYTES_MAX)
        finally:
            os.close(fd)
    finally:
        os.close(dir_fd)


# Errors that describe the file, not a failed read: ENOENT (missing, or the directory vanished),
# ELOOP (a symlink), ENOTDIR (the directory was replaced by a file), EACCES/EPERM (left alone).
_CONTENT_ERRNOS: Final = frozenset({errno.ENOENT, errno.ELOOP, errno.ENOTDIR})


def read_partition_metadata(
    directory: Path, read_file: Callable[[Path], bytes] = read_partition_metadata_bytes
) -> tuple[EntryState, Uuid | None, str]:
    """(state, topic id, why not) of ``directory/partition.metadata``. Raises ``OSError`` for
    an I/O error (EIO, EMFILE, ENOMEM, ...): that says nothing about the file, so it must never
    become a state a plan acts on."""
    try:
        data = read_file(directory)
    except FileNotFoundError:
        return EntryState.METADATA_MISSING, None, "partition.metadata is missing"
    except PermissionError as exc:
        return EntryState.INACCESSIBLE, None, f"partition.metadata: {exc}"
    except NotARegularFileError as exc:
        return EntryState.METADATA_UNREADABLE, None, f"partition.metadata: {exc}"
    except OSError as exc:
        if exc.errno not in _CONTENT_ERRNOS:
            raise
        why = "is a symlink" if exc.errno == errno.ELOOP else f"cannot be opened: {exc}"
        return EntryState.METADATA_UNREADABLE, None, f"partition.metadata {why}"
    try:
        topic_id = partition_metadata.parse(data)
    except InvalidPartitionMetadata as exc:
        return EntryState.METADATA_UNREADABLE, None, str(exc)
    return EntryState.OK, topic_id, ""


def _open_metadata_file(dir_fd: int) -> int:
    # O_NONBLOCK: a FIFO named partition.metadata must not hang the scan.
    return os.open(PARTITION_METADATA_FILE, _METADATA_OPEN_FLAGS, dir_fd=dir_fd)


def _read_regular_file(fd: int, bytes_max: int) -> bytes:
    """Up to ``bytes_max + 1`` bytes (so the caller sees "too big"); ValueError if ``fd`` is
    not a regular file."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise NotARegularFileError(f"not a regular file but a {_kind(st.st_mode)}")
    chunks: list[bytes] = []
    total = 0
    # Each pass reads at least one byte or ends the loop, so it runs at most bytes_max+1 times.
    while total <= bytes_max:
        chunk = os.read(fd, bytes_max + 1 - total)
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def _list_log_dir(directory: Path) -> list[str]:
    try:
        st = os.stat(directory)  # the configured root itself may be a symlink (a mount)
        if not stat.S_ISDIR(st.st_mode):
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(directory))
        return sorted(os.listdir(directory))
    except OSError as exc:
        raise LogDirUnavailableError(
            f"log dir {directory} cannot be listed: {exc}", log_dir=directory
        ) from exc


def tree_bytes(path: Path) -> int:
    """Bytes under ``path`` (lstat sizes, symlinks not followed, unreadable parts skipped)."""
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    if not stat.S_ISDIR(st.st_mode):
        return st.st_size
    total = 0
    for root, dirs, files in os.walk(path, followlinks=False):
        for name in files + dirs:
            try:
                entry = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if not stat.S_ISDIR(entry.st_mode):
                total += entry.st_size
    return total


def _rename_no_replace(source: Path, destination: Path) -> None:
    # os.rename would silently replace an empty directory or a file; this module owns its log
    # dirs, so the check-then-rename window is not raced by anyone.
    if os.path.lexists(destination):
        raise FileExistsError(errno.EEXIST, "destination exists", str(destination))
    os.rename(source, destination)


def _remove_tree(path: Path) -> None:
    st = os.lstat(path)
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path)  # does not follow symlinks inside (fd-based on Linux)
    else:
        os.unlink(path)  # a moved-aside file or symlink: the link, never its target


def _reraise_eio(exc: OSError) -> None:
    if exc.errno == errno.EIO:
        raise exc


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISREG(mode):
        return "regular file"
    if stat.S_ISDIR(mode):
        return "directory"
    return "special file"
