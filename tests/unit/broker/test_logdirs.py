"""broker/logdirs.py on real directories: scan, atomic create, move aside, delete when due,
restarts, hostile entries (F21), crashes mid-reconciliation (F22) and the I11 checker."""

from __future__ import annotations

import errno
import json
import os
import random
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from broker import logdirs as logdirs_module
from broker import partition_metadata, reconcile
from broker.logdirs import (
    FAILPOINT_AFTER_RENAME_BEFORE_DIRFSYNC,
    FAILPOINT_BEFORE_CREATE_RENAME,
    FAILPOINT_BEFORE_JOURNAL_WRITE,
    PENDING_JOURNAL,
    LogDirs,
    LogDirUnavailableError,
    PartitionMetadataReadError,
    describe_plan,
    iso_time,
    snapshot_log_dirs,
)
from broker.reconcile import (
    DELETING_DIR,
    EntryState,
    LocalPartition,
    MoveReason,
    ReconcileMode,
    apply_plan,
    deleting_base_name,
    i11_violations,
)
from quorum.harness import directory_state
from quorum.ids import Uuid
from quorum.limits import PARTITION_METADATA_READ_ATTEMPTS_MAX, PARTITION_METADATA_READ_BACKOFF_MS
from quorum.storage import fsutil

FULL = ReconcileMode.FULL
INCREMENTAL = ReconcileMode.INCREMENTAL
_rng = random.Random(14616)
ID0, ID1, ID_B = (Uuid.random(_rng) for _ in range(3))
NOW = 1_700_000_000_000
DELAY = 60_000

Key = tuple[Uuid, int]


class Crash(Exception):
    """A simulated kill -9 at a failpoint (not an OSError, so nothing catches it)."""


def crash_at(name: str) -> object:
    def failpoint(point: str) -> None:
        if point == name:
            raise Crash(point)

    return failpoint


@pytest.fixture
def d1(tmp_path: Path) -> Path:
    path = tmp_path / "d1"
    path.mkdir()
    return path


@pytest.fixture
def d2(tmp_path: Path) -> Path:
    path = tmp_path / "d2"
    path.mkdir()
    return path


def make_partition(log_dir: Path, dir_name: str, topic_id: Uuid | None, data: bytes = b"") -> Path:
    path = log_dir / dir_name
    path.mkdir()
    if topic_id is not None:
        (path / "partition.metadata").write_bytes(partition_metadata.render(topic_id))
    (path / "00000000000000000000.log").write_bytes(data)
    return path


def logdirs(*dirs: Path, **kwargs: object) -> LogDirs:
    return LogDirs(list(dirs), rng=random.Random(7), **kwargs)  # type: ignore[arg-type]


def reconcile_now(
    dirs: LogDirs,
    assigned: Mapping[Key, str],
    mode: ReconcileMode = FULL,
    now_ms: int = NOW,
    removed: frozenset[Key] = frozenset(),
) -> tuple[reconcile.ReconcilePlan, logdirs_module.ExecuteResult]:
    return dirs.reconcile(
        assigned=assigned, mode=mode, now_ms=now_ms, delete_delay_ms=DELAY, removed=removed
    )


def by_name(on_disk: tuple[LocalPartition, ...]) -> dict[str, LocalPartition]:
    return {e.dir_name: e for e in on_disk}


def entries(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


# ----- scan -----------------------------------------------------------------------------------


def test_scan_reports_every_kind_of_entry_and_never_refuses_to_start(d1: Path) -> None:
    """KAFKA-16814: missing or garbage partition.metadata is reported, never fatal."""
    make_partition(d1, "ok-0", ID1)
    make_partition(d1, "nometa-0", None)
    garbage = make_partition(d1, "garbage-0", None)
    (garbage / "partition.metadata").write_bytes(b"\xff\x00 not a file we wrote")
    huge = make_partition(d1, "huge-0", None)
    (huge / "partition.metadata").write_bytes(b"version: 0\n" * 1000)
    is_dir = make_partition(d1, "isdir-0", None)
    (is_dir / "partition.metadata").mkdir()
    fifo = make_partition(d1, "fifo-0", None)
    os.mkfifo(fifo / "partition.metadata")
    linked = make_partition(d1, "linked-0", None)
    (linked / "partition.metadata").symlink_to(d1 / "ok-0" / "partition.metadata")
    make_partition(d1, "junk", ID0)
    (d1 / "file-0").write_bytes(b"x")
    (d1 / "meta.properties").write_text("version=1\n")
    (d1 / "recovery-point-offset-checkpoint").write_text("0\n")
    make_partition(d1, "__cluster_metadata-0", None)
    (d1 / "lost+found").mkdir()

    with capture_logs() as logs:
        scan = logdirs(d1).scan()
    found = by_name(scan.on_disk)
    assert set(found) == {
        "ok-0",
        "nometa-0",
        "garbage-0",
        "huge-0",
        "isdir-0",
        "fifo-0",
        "linked-0",
        "junk",
        "file-0",
    }
    assert found["ok-0"] == LocalPartition(str(d1), "ok-0", EntryState.OK, ID1)
    assert found["junk"].topic_id == ID0
    assert found["nometa-0"].state is EntryState.METADATA_MISSING
    assert found["file-0"].state is EntryState.NOT_A_DIRECTORY
    for name, words in [
        ("garbage-0", "not UTF-8"),
        ("huge-0", "bytes; a valid one"),
        ("isdir-0", "not a regular file"),
        ("fifo-0", "not a regular file"),
        ("linked-0", "is a symlink"),
    ]:
        assert found[name].state is EntryState.METADATA_UNREADABLE, name
        assert words in found[name].detail, found[name]
    assert scan.pending_deletions == ()
    warned = {log["dir"] for log in logs if log["event"] == "partition_metadata_unreadable"}
    assert {Path(d).name for d in warned} == {
        "garbage-0",
        "huge-0",
        "isdir-0",
        "fifo-0",
        "linked-0",
    }


def test_symlinked_partition_dir_is_not_followed(d1: Path, tmp_path: Path) -> None:
    target = make_partition(tmp_path, "elsewhere", ID1, data=b"precious")
    (d1 / "a-0").symlink_to(target, target_is_directory=True)
    dirs = logdirs(d1)
    scan = dirs.scan()
    assert scan.on_disk == (
        LocalPartition(
            str(d1), "a-0", EntryState.NOT_A_DIRECTORY, detail="a symlink, not a directory"
        ),
    )
    # FULL: the link is a stray, moved aside; the target is never read, moved or deleted.
    plan, result = reconcile_now(dirs, {})
    assert [m.reason for m in result.moved] == [MoveReason.NOT_A_DIRECTORY]
    reconcile_now(dirs, {}, now_ms=NOW + DELAY)
    assert entries(d1 / DELETING_DIR) == [PENDING_JOURNAL]
    assert (target / "00000000000000000000.log").read_bytes() == b"precious"
    assert plan.move_aside[0].destination == deleting_base_name(None, 0, "a-0")


def test_permission_denied_entries_are_skipped_with_a_warning(
    d1: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """We run as root in CI, so EACCES is injected at the one place the scan opens the file."""
    make_partition(d1, "a-0", ID1)
    make_partition(d1, "locked-0", ID0)

    real_open = logdirs_module._open_metadata_file

    def deny_locked(dir_fd: int) -> int:
        if os.readlink(f"/proc/self/fd/{dir_fd}").endswith("locked-0"):
            raise PermissionError(errno.EACCES, "Permission denied")
        return real_open(dir_fd)

    monkeypatch.setattr(logdirs_module, "_open_metadata_file", deny_locked)
    dirs = logdirs(d1)
    with capture_logs() as logs:
        plan, result = reconcile_now(dirs, {(ID1, 0): "a"})
    assert [log["event"] for log in logs if log["log_level"] == "warning"] == [
        "partition_dir_inaccessible"
    ]
    assert plan.move_aside == ()
    assert "Permission denied" in plan.conflicts[0].message
    assert result.failures == ()
    assert (d1 / "locked-0").is_dir()


# ----- partition.metadata reads fail safe (issue #12) -----------------------------------------


def failing_reads(
    fail: Mapping[str, int], error: int, calls: list[str] | None = None
) -> Callable[[Path], bytes]:
    """A ``LogDirs(read_file=...)`` double: the first ``fail[dir name]`` reads of that
    directory's partition.metadata raise ``OSError(error)``; the others read the real file."""
    left = dict(fail)

    def read_file(directory: Path) -> bytes:
        if calls is not None:
            calls.append(directory.name)
        if left.get(directory.name, 0) > 0:
            left[directory.name] -= 1
            raise OSError(error, os.strerror(error))
        return logdirs_module.read_partition_metadata_bytes(directory)

    return read_file


IO_ERRORS = [errno.EIO, errno.EMFILE, errno.ENFILE, errno.ENOMEM]


@pytest.mark.parametrize("error", IO_ERRORS, ids=errno.errorcode.get)
@pytest.mark.parametrize("mode", [FULL, INCREMENTAL])
def test_a_transient_io_error_on_partition_metadata_is_retried(
    d1: Path, error: int, mode: ReconcileMode
) -> None:
    make_partition(d1, "a-0", ID1, b"live data")
    make_partition(d1, "b-0", ID0, b"other")
    before = directory_state(d1)
    sleeps: list[float] = []
    reads = failing_reads({"a-0": PARTITION_METADATA_READ_ATTEMPTS_MAX - 1}, error)
    dirs = logdirs(d1, read_file=reads, sleep=sleeps.append)
    with capture_logs() as logs:
        plan, result = reconcile_now(dirs, {(ID1, 0): "a", (ID0, 0): "b"}, mode=mode)
    assert plan.is_empty and plan.conflicts == () and result.failures == ()
    assert directory_state(d1) == before
    assert sleeps == [PARTITION_METADATA_READ_BACKOFF_MS / 1000] * (
        PARTITION_METADATA_READ_ATTEMPTS_MAX - 1
    )
    retried = [log for log in logs if log["event"] == "partition_metadata_read_retried"]
    assert [log["errno"] for log in retried] == [error] * len(sleeps)
    assert retried[0]["path"] == str(d1 / "a-0" / "partition.metadata")


@pytest.mark.parametrize("error", IO_ERRORS, ids=errno.errorcode.get)
@pytest.mark.parametrize("assigned", [True, False], ids=["assigned", "unassigned"])
def test_a_persistent_io_error_stops_the_broker_and_never_moves_the_directory(
    d1: Path, error: int, assigned: bool
) -> None:
    """Before this change an EIO/EMFILE read made the directory METADATA_UNREADABLE and a FULL
    plan moved the live partition, data and all, to deleting/."""
    make_partition(d1, "a-0", ID1, b"live data")
    make_partition(d1, "stray-0", ID0, b"stray")
    before = directory_state(d1)
    sleeps: list[float] = []
    calls: list[str] = []
    reads = failing_reads({"a-0": 1_000}, error, calls)
    dirs = logdirs(d1, read_file=reads, sleep=sleeps.append)
    with capture_logs() as logs, pytest.raises(PartitionMetadataReadError) as caught:
        reconcile_now(dirs, {(ID1, 0): "a"} if assigned else {})
    assert caught.value.path == d1 / "a-0" / "partition.metadata"
    assert caught.value.errno == error
    message = str(caught.value)
    assert str(d1 / "a-0" / "partition.metadata") in message
    assert f"errno {error} {errno.errorcode[error]}" in message
    assert isinstance(caught.value, LogDirUnavailableError)
    assert calls.count("a-0") == PARTITION_METADATA_READ_ATTEMPTS_MAX, "bounded, no loop"
    assert len(sleeps) == PARTITION_METADATA_READ_ATTEMPTS_MAX - 1
    assert directory_state(d1) == before, "nothing moved, written or deleted: not even the stray"
    (failed,) = [log for log in logs if log["event"] == "partition_metadata_read_failed"]
    assert failed["log_level"] == "error" and failed["errno"] == error


def test_the_default_reader_turns_a_real_errno_into_a_retry(
    d1: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The seam's real implementation: an EIO from os.open inside it is an I/O error, not a
    state (the test double above stands in for the same function)."""
    make_partition(d1, "a-0", ID1)

    def eio(dir_fd: int) -> int:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(logdirs_module, "_open_metadata_file", eio)
    with pytest.raises(PartitionMetadataReadError, match="errno 5 EIO"):
        logdirs(d1, sleep=lambda s: None).scan()
    assert (d1 / "a-0" / "partition.metadata").is_file()


@pytest.mark.parametrize("mode", [FULL, INCREMENTAL])
def test_a_missing_partition_metadata_of_an_assigned_partition_is_written(
    d1: Path, mode: ReconcileMode
) -> None:
    path = make_partition(d1, "a-0", None, b"precious")
    inode = path.stat().st_ino
    before = snapshot_log_dirs([d1])
    dirs = logdirs(d1)
    with capture_logs() as logs:
        plan, result = reconcile_now(dirs, {(ID1, 0): "a"}, mode=mode)
    assert plan.move_aside == () and plan.creates == ()
    assert result.metadata_written == plan.write_metadata
    assert partition_metadata.parse((path / "partition.metadata").read_bytes()) == ID1
    assert (path / "00000000000000000000.log").read_bytes() == b"precious"
    assert path.stat().st_ino == inode
    assert "partition_metadata_written" in [log["event"] for log in logs]
    after = snapshot_log_dirs([d1])
    assert i11_violations(assigned={(ID1, 0)}, before=before, after=after) == []
    assert reconcile_now(dirs, {(ID1, 0): "a"}, now_ms=NOW + 1)[0].is_empty


def test_a_metadata_write_never_replaces_a_file_that_appeared(d1: Path) -> None:
    path = make_partition(d1, "a-0", None)
    dirs = logdirs(d1)
    plan = dirs.plan(assigned={(ID1, 0): "a"}, mode=FULL, now_ms=NOW, delete_delay_ms=DELAY)
    (path / "partition.metadata").write_bytes(partition_metadata.render(ID0))
    result = dirs.execute(plan)
    assert [f.action for f in result.failures] == ["write_metadata"]
    assert partition_metadata.parse((path / "partition.metadata").read_bytes()) == ID0


def test_a_corrupt_partition_metadata_of_an_assigned_partition_is_left_and_reported(
    d1: Path,
) -> None:
    path = make_partition(d1, "a-0", None, b"precious")
    (path / "partition.metadata").write_bytes(b"version: 0\ntopic_id: \xff\xfe\n")
    before = directory_state(d1)
    dirs = logdirs(d1)
    with capture_logs() as logs:
        for mode in (FULL, INCREMENTAL):
            plan, _ = reconcile_now(dirs, {(ID1, 0): "a"}, mode=mode)
            assert plan.is_empty, plan
    assert directory_state(d1) == before
    conflicts = [log for log in logs if log["event"] == "reconcile_conflict"]
    assert len(conflicts) == 2 and all(log["log_level"] == "error" for log in conflicts)
    assert "repair partition.metadata" in conflicts[0]["message"]
    # Repaired by the operator: the directory is the live copy, untouched.
    (path / "partition.metadata").write_bytes(partition_metadata.render(ID1))
    assert reconcile_now(dirs, {(ID1, 0): "a"})[0].is_empty
    assert (path / "00000000000000000000.log").read_bytes() == b"precious"


@pytest.mark.parametrize("how", ["missing", "file"])
def test_an_unusable_log_dir_root_stops_the_scan(tmp_path: Path, how: str) -> None:
    root = tmp_path / "d"
    if how == "file":
        root.write_text("")
    with pytest.raises(LogDirUnavailableError, match="cannot be listed"):
        logdirs(root).scan()


def test_deleting_that_is_not_a_directory_stops_the_scan(d1: Path) -> None:
    (d1 / DELETING_DIR).write_text("oops")
    with pytest.raises(LogDirUnavailableError, match="not a directory"):
        logdirs(d1).scan()


def test_a_symlinked_log_dir_root_is_fine(d1: Path, tmp_path: Path) -> None:
    make_partition(d1, "a-0", ID1)
    link = tmp_path / "link"
    link.symlink_to(d1, target_is_directory=True)
    assert [e.dir_name for e in logdirs(link).scan().on_disk] == ["a-0"]


# ----- create ---------------------------------------------------------------------------------


def test_create_writes_partition_metadata_and_leaves_no_build_dir(d1: Path) -> None:
    dirs = logdirs(d1)
    with capture_logs() as logs:
        plan, result = reconcile_now(dirs, {(ID1, 0): "a", (ID1, 1): "a"})
    assert entries(d1) == ["a-0", "a-1"]
    assert partition_metadata.parse((d1 / "a-0" / "partition.metadata").read_bytes()) == ID1
    assert entries(d1 / "a-0") == ["partition.metadata"]
    assert result.created == plan.creates
    assert [log["event"] for log in logs] == ["partition_created", "partition_created"]
    assert reconcile_now(dirs, {(ID1, 0): "a", (ID1, 1): "a"})[0].is_empty


def test_create_is_durable_before_it_is_visible(d1: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Order: partition.metadata fsynced inside the build dir, then the rename, then the fsync
    of the log dir."""
    events: list[str] = []
    real_write = fsutil.write_file_atomically
    real_rename = os.rename

    def write(path: Path, data: bytes) -> None:
        real_write(path, data)
        events.append(f"write {path.parent.name}/{path.name}")

    def rename(src: object, dst: object) -> None:
        real_rename(src, dst)  # type: ignore[arg-type]
        events.append(f"rename {Path(str(dst)).name}")

    monkeypatch.setattr("broker.logdirs.write_file_atomically", write)
    monkeypatch.setattr(
        logdirs_module, "fsync_directory", lambda p: events.append(f"fsync {p.name}")
    )
    monkeypatch.setattr(os, "rename", rename)
    reconcile_now(logdirs(d1), {(ID1, 0): "a"})
    assert len(events) == 3
    assert events[0].startswith("write a-0.tmp-")
    assert events[0].endswith("/partition.metadata")
    assert events[1:] == ["rename a-0", "fsync d1"]


def test_crash_before_the_create_rename_leaves_a_build_dir_that_full_moves_aside(d1: Path) -> None:
    assigned = {(ID1, 0): "a"}
    with pytest.raises(Crash):
        reconcile_now(logdirs(d1, failpoint=crash_at(FAILPOINT_BEFORE_CREATE_RENAME)), assigned)
    (build,) = entries(d1)
    assert build.startswith("a-0.tmp-")
    before = snapshot_log_dirs([d1])
    # Restart. An INCREMENTAL plan leaves the build dir alone; the FULL one moves it aside.
    dirs = logdirs(d1)
    plan, _ = reconcile_now(dirs, assigned, mode=INCREMENTAL)
    assert plan.move_aside == ()
    assert (d1 / build).is_dir()
    plan, result = reconcile_now(dirs, assigned)
    assert [(m.dir_name, m.reason, m.destination) for m in result.moved] == [
        (build, MoveReason.LEFTOVER_BUILD_DIR, f"{ID1}_0")
    ]
    assert entries(d1) == ["a-0", DELETING_DIR]
    after = snapshot_log_dirs([d1])
    assert i11_violations(assigned=set(assigned), before=before, after=after) == []


def test_create_refuses_to_replace_an_entry_that_appeared(d1: Path) -> None:
    dirs = logdirs(d1)
    plan = dirs.plan(assigned={(ID1, 0): "a"}, mode=FULL, now_ms=NOW, delete_delay_ms=DELAY)
    (d1 / "a-0").mkdir()  # an empty dir: os.rename would silently replace it
    with capture_logs() as logs:
        result = dirs.execute(plan)
    assert result.created == ()
    assert result.failures[0].action == "create"
    assert "exists" in result.failures[0].error
    assert logs[0]["event"] == "partition_create_failed"
    assert entries(d1) == ["a-0"]
    assert entries(d1 / "a-0") == []


# ----- move aside, restart, delete ------------------------------------------------------------


def test_f20_topic_recreated_while_away_end_to_end(d1: Path) -> None:
    """The seed's stale state on disk: A-0 (id0) is moved to deleting/{id0}_0 with a WARN that
    says when it will be deleted, A-0 (id1) is created, and the old data survives until due."""
    make_partition(d1, "A-0", ID0, data=b"old data")
    dirs = logdirs(d1)
    with capture_logs() as logs:
        _, result = reconcile_now(dirs, {(ID1, 0): "A"})
    assert result.failures == ()
    moved_log = next(log for log in logs if log["event"] == "partition_moved_aside")
    assert moved_log["log_level"] == "warning"
    assert moved_log["dir"] == str(d1 / "A-0")
    assert moved_log["topic_id"] == str(ID0)
    assert moved_log["partition"] == 0
    assert moved_log["reason"] == "topic_id_mismatch"
    assert moved_log["delete_at"] == iso_time(NOW + DELAY)
    assert moved_log["delete_at"].startswith("2023-11-14T22:14:20.000")
    stale = d1 / DELETING_DIR / f"{ID0}_0"
    assert (stale / "00000000000000000000.log").read_bytes() == b"old data"
    assert partition_metadata.parse((d1 / "A-0" / "partition.metadata").read_bytes()) == ID1
    journal = json.loads((d1 / DELETING_DIR / PENDING_JOURNAL).read_text())
    assert journal["pending"][f"{ID0}_0"] == {
        "delete_at_ms": NOW + DELAY,
        "topic_id": str(ID0),
        "partition": 0,
        "reason": "topic_id_mismatch",
        "source": "A-0",
    }
    assert dirs.bytes_pending_deletion() == len(b"old data") + len(partition_metadata.render(ID0))
    assert dirs.next_deletion_due_ms() == NOW + DELAY

    # Restart: a new LogDirs finds the pending deletion with its due time.
    restarted = logdirs(d1)
    assert restarted.plan(
        assigned={(ID1, 0): "A"}, mode=FULL, now_ms=NOW + 1, delete_delay_ms=DELAY
    ).is_empty
    (pending,) = restarted.pending_deletions()
    assert pending.delete_at_ms == NOW + DELAY
    assert pending.source == "A-0"
    assert restarted.bytes_pending_deletion() == dirs.bytes_pending_deletion()
    assert restarted.describe_pending()[0]["delete_at"] == iso_time(NOW + DELAY)

    # Not due one millisecond early; deleted when due.
    _, result = reconcile_now(restarted, {(ID1, 0): "A"}, now_ms=NOW + DELAY - 1)
    assert result.deleted == ()
    with capture_logs() as logs:
        _, result = reconcile_now(restarted, {(ID1, 0): "A"}, now_ms=NOW + DELAY)
    assert [d.name for d in result.deleted] == [f"{ID0}_0"]
    assert logs[-1]["event"] == "partition_deleted"
    assert entries(d1 / DELETING_DIR) == [PENDING_JOURNAL]
    assert json.loads((d1 / DELETING_DIR / PENDING_JOURNAL).read_text())["pending"] == {}
    assert restarted.bytes_pending_deletion() == 0
    assert restarted.next_deletion_due_ms() is None


def test_move_aside_is_durable_before_it_is_journaled(
    d1: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """I11d: rename, fsync of both parents, and only then the due time in pending.json."""
    make_partition(d1, "old-0", ID0)
    events: list[str] = []
    real_rename = os.rename
    real_write = fsutil.write_file_atomically

    def rename(src: object, dst: object) -> None:
        real_rename(src, dst)  # type: ignore[arg-type]
        events.append(f"rename {Path(str(src)).name}")

    def write(path: Path, data: bytes) -> None:
        real_write(path, data)
        events.append(f"write {path.name}")

    monkeypatch.setattr(os, "rename", rename)
    monkeypatch.setattr("broker.logdirs.write_file_atomically", write)
    monkeypatch.setattr(
        logdirs_module, "fsync_directory", lambda p: events.append(f"fsync {p.name}")
    )
    reconcile_now(logdirs(d1), {})
    assert events == [
        "rename old-0",
        "fsync d1",
        f"fsync {DELETING_DIR}",
        f"write {PENDING_JOURNAL}",
    ]


@pytest.mark.parametrize(
    "point", [FAILPOINT_AFTER_RENAME_BEFORE_DIRFSYNC, FAILPOINT_BEFORE_JOURNAL_WRITE]
)
def test_f22_crash_after_the_move_reschedules_never_deletes_on_sight(d1: Path, point: str) -> None:
    make_partition(d1, "old-0", ID0)
    with pytest.raises(Crash):
        reconcile_now(logdirs(d1, failpoint=crash_at(point)), {})
    assert entries(d1 / DELETING_DIR) == [f"{ID0}_0"]
    # Restart much later: the orphan has no due time, so it is scheduled, not deleted.
    dirs = logdirs(d1)
    later = NOW + 10 * DELAY
    with capture_logs() as logs:
        plan, result = reconcile_now(dirs, {}, now_ms=later)
    assert plan.deletes == ()
    assert [(s.name, s.delete_at_ms) for s in result.scheduled] == [(f"{ID0}_0", later + DELAY)]
    assert logs[0]["event"] == "pending_deletion_scheduled"
    assert (d1 / DELETING_DIR / f"{ID0}_0").is_dir()
    assert reconcile_now(logdirs(d1), {}, now_ms=later + 1)[0].is_empty
    _, result = reconcile_now(logdirs(d1), {}, now_ms=later + DELAY)
    assert len(result.deleted) == 1


def test_a_garbage_journal_reschedules_everything(d1: Path) -> None:
    make_partition(d1, "old-0", ID0)
    reconcile_now(logdirs(d1), {})
    (d1 / DELETING_DIR / PENDING_JOURNAL).write_bytes(b"{not json")
    dirs = logdirs(d1)
    with capture_logs() as logs:
        plan, _ = reconcile_now(dirs, {}, now_ms=NOW + 5 * DELAY)
    assert logs[0]["event"] == "pending_deletions_journal_unreadable"
    assert plan.deletes == ()
    assert [s.delete_at_ms for s in plan.schedules] == [NOW + 6 * DELAY]


def test_the_same_partition_moved_twice_gets_a_suffixed_name(d1: Path) -> None:
    make_partition(d1, "a-0", ID0)
    dirs = logdirs(d1)
    reconcile_now(dirs, {})
    make_partition(d1, "a-0", ID0)  # it came back (e.g. restored from a backup)
    reconcile_now(dirs, {}, now_ms=NOW + 1)
    assert entries(d1 / DELETING_DIR) == sorted([f"{ID0}_0", f"{ID0}_0.1", PENDING_JOURNAL])
    assert [p.delete_at_ms for p in logdirs(d1).scan().pending_deletions] == [
        NOW + DELAY,
        NOW + 1 + DELAY,
    ]


@pytest.mark.parametrize("mode", [FULL, INCREMENTAL])
def test_a_regular_file_where_an_assigned_partition_belongs(d1: Path, mode: ReconcileMode) -> None:
    (d1 / "a-0").write_bytes(b"not a partition")
    _, result = reconcile_now(logdirs(d1), {(ID1, 0): "a"}, mode=mode)
    assert [m.reason for m in result.moved] == [MoveReason.NOT_A_DIRECTORY]
    assert (d1 / "a-0" / "partition.metadata").is_file()
    (moved,) = [n for n in entries(d1 / DELETING_DIR) if n != PENDING_JOURNAL]
    assert (d1 / DELETING_DIR / moved).read_bytes() == b"not a partition"
    _, result = reconcile_now(logdirs(d1), {(ID1, 0): "a"}, mode=mode, now_ms=NOW + DELAY)
    assert len(result.deleted) == 1


def test_incremental_removal(d1: Path) -> None:
    make_partition(d1, "a-0", ID1)
    make_partition(d1, "a-1", ID1)
    dirs = logdirs(d1)
    _, result = reconcile_now(
        dirs, {(ID1, 0): "a"}, mode=INCREMENTAL, removed=frozenset({(ID1, 1)})
    )
    assert [(m.dir_name, m.reason) for m in result.moved] == [("a-1", MoveReason.REMOVED)]
    assert entries(d1) == ["a-0", DELETING_DIR]


def full_disk_on_rename(
    monkeypatch: pytest.MonkeyPatch, fails: Callable[[Path, Path], bool]
) -> None:
    """``os.rename`` fails with ENOSPC where ``fails(source, destination)``, else renames."""
    real_rename = os.rename

    def rename(src: object, dst: object) -> None:
        if fails(Path(str(src)), Path(str(dst))):
            raise OSError(errno.ENOSPC, "No space left on device")
        real_rename(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "rename", rename)


def scoped(
    dirs: LogDirs, assigned: Mapping[Key, str], scope: Mapping[Key, str], now_ms: int = NOW
) -> tuple[reconcile.ReconcilePlan, logdirs_module.ExecuteResult]:
    """An INCREMENTAL pass over the partitions a delta touched, as the broker runs it."""
    return dirs.reconcile(
        assigned=assigned,
        mode=INCREMENTAL,
        now_ms=now_ms,
        delete_delay_ms=DELAY,
        removed=frozenset(scope) - set(assigned),
        scope=scope,
    )


def test_a_scoped_pass_reads_only_the_entries_the_delta_names(d1: Path) -> None:
    """With many partitions held, a new one costs one read, not one per partition held; what
    the delta does not name (even a stray) is left for the next FULL pass."""
    for p in range(50):
        make_partition(d1, f"held-{p}", ID0)
    make_partition(d1, "stray-0", ID_B)
    reads: list[str] = []

    def read_file(directory: Path) -> bytes:
        reads.append(directory.name)
        return logdirs_module.read_partition_metadata_bytes(directory)

    dirs = logdirs(d1, read_file=read_file)
    plan, result = scoped(dirs, {(ID1, 0): "new"}, {(ID1, 0): "new"})
    assert reads == [] and [c.dir_name for c in result.created] == ["new-0"]
    assert not plan.move_aside and (d1 / "stray-0").is_dir()
    # Recreated under the same name with another id: the old copy is read, moved aside, and the
    # new incarnation made in its place.
    plan, result = scoped(dirs, {(ID_B, 0): "new"}, {(ID1, 0): "new", (ID_B, 0): "new"})
    assert reads == ["new-0"]
    assert [(m.dir_name, m.reason) for m in result.moved] == [
        ("new-0", MoveReason.TOPIC_ID_MISMATCH)
    ]
    assert [c.dir_name for c in result.created] == ["new-0"]
    assert partition_metadata.parse((d1 / "new-0" / "partition.metadata").read_bytes()) == ID_B
    # Lost: the live copy the delta names is moved aside, nothing else is read.
    reads.clear()
    plan, result = scoped(dirs, {}, {(ID0, 3): "held"})
    assert reads == ["held-3"]
    assert [(m.dir_name, m.reason) for m in result.moved] == [("held-3", MoveReason.REMOVED)]
    assert not result.unfinished(plan)


def test_a_scoped_pass_places_new_partitions_by_every_partition_held(d1: Path, d2: Path) -> None:
    """Kafka's placement (the log dir with the fewest partitions) counts what a scoped pass
    did not read."""
    for p in range(3):
        make_partition(d1, f"held-{p}", ID0)
    make_partition(d2, "held-3", ID0)
    dirs = logdirs(d1, d2)
    scope = {(ID1, p): "new" for p in range(3)}
    _, result = scoped(dirs, scope, scope)
    assert sorted((Path(c.log_dir).name, c.dir_name) for c in result.created) == [
        ("d1", "new-2"),
        ("d2", "new-0"),
        ("d2", "new-1"),
    ]


def test_a_scoped_pass_names_what_failed_for_the_next_one(
    d1: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    full_disk_on_rename(monkeypatch, lambda src, dst: dst.name == "b-0")
    scope = {(ID1, 0): "a", (ID_B, 0): "b"}
    plan, result = scoped(logdirs(d1), scope, scope)
    assert [c.dir_name for c in result.created] == ["a-0"]
    assert result.unfinished(plan) == {"b-0"}
    monkeypatch.undo()
    plan, result = scoped(logdirs(d1), {(ID_B, 0): "b"}, {(ID_B, 0): "b"})
    assert [c.dir_name for c in result.created] == ["b-0"] and not result.unfinished(plan)


def test_a_failed_move_leaves_no_half_state_and_the_rest_goes_on(
    d1: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """F16-like: ENOSPC (or EACCES) on one rename is reported; the other move completes."""
    make_partition(d1, "a-0", ID0)
    make_partition(d1, "b-0", ID_B)
    full_disk_on_rename(monkeypatch, lambda src, dst: src.name == "a-0")
    dirs = logdirs(d1)
    _, result = reconcile_now(dirs, {})
    assert [f.action for f in result.failures] == ["move_aside"]
    assert [m.dir_name for m in result.moved] == ["b-0"]
    assert (d1 / "a-0").is_dir()
    assert list(json.loads((d1 / DELETING_DIR / PENDING_JOURNAL).read_text())["pending"]) == [
        f"{ID_B}_0"
    ]


def test_enospc_on_the_journal_leaves_the_move_unscheduled_until_the_next_plan(
    d1: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_partition(d1, "old-0", ID0)

    def full_disk(path: Path, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("broker.logdirs.write_file_atomically", full_disk)
    dirs = logdirs(d1)
    _, result = reconcile_now(dirs, {})
    assert [f.action for f in result.failures] == ["schedule"]
    assert [p.delete_at_ms for p in dirs.pending_deletions()] == [None]
    assert dirs.next_deletion_due_ms() is None
    monkeypatch.undo()
    plan, result = reconcile_now(dirs, {}, now_ms=NOW + 1)
    assert plan.deletes == ()
    assert [s.delete_at_ms for s in result.scheduled] == [NOW + 1 + DELAY]


def test_eio_is_not_swallowed(d1: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_partition(d1, "a-0", ID0)

    def rename(src: object, dst: object) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(OSError, match="Input/output"):
        reconcile_now(logdirs(d1), {})


# ----- multiple log dirs ----------------------------------------------------------------------


def test_partitions_are_placed_in_the_least_loaded_log_dir_and_found_anywhere(
    d1: Path, d2: Path
) -> None:
    make_partition(d1, "x-0", ID0)
    make_partition(d1, "x-1", ID0)
    make_partition(d2, "x-2", ID0)
    assigned = {(ID0, p): "x" for p in range(3)} | {(ID1, p): "y" for p in range(3)}
    dirs = logdirs(d1, d2)
    plan, _ = reconcile_now(dirs, assigned)
    assert [(c.dir_name, Path(c.log_dir).name) for c in plan.creates] == [
        ("y-0", "d2"),
        ("y-1", "d1"),
        ("y-2", "d2"),
    ]
    assert entries(d1) == ["x-0", "x-1", "y-1"]
    assert entries(d2) == ["x-2", "y-0", "y-2"]
    # A stale copy in one dir goes to that dir's own deleting/ (a rename never crosses disks).
    make_partition(d2, "z-0", ID_B)
    _, result = reconcile_now(dirs, assigned)
    assert [Path(m.log_dir).name for m in result.moved] == ["d2"]
    assert (d2 / DELETING_DIR / f"{ID_B}_0").is_dir()
    assert not (d1 / DELETING_DIR).exists()


# ----- the model, the dry run, the I11 checker ------------------------------------------------


def messy_disk(d1: Path, d2: Path, tmp_path: Path) -> dict[Key, str]:
    """Every F21 case plus live assigned partitions with data; returns the assignment."""
    make_partition(d1, "keep-0", ID1, data=b"keep 0")
    make_partition(d2, "keep-1", ID1, data=b"keep 1")
    make_partition(d1, "A-0", ID0, data=b"stale")  # topic A recreated as ID_B
    make_partition(d1, "gone-0", ID0)
    make_partition(d2, "nometa-0", None)
    garbage = make_partition(d2, "garbage-3", None)
    (garbage / "partition.metadata").write_bytes(b"topic_id: ???")
    make_partition(d1, "foo-0.3fa9c2d1e0b4-stray", ID0)
    make_partition(d1, "foo-0.3fa9c2d1e0b4-delete", None)
    make_partition(d2, "keep-2.tmp-qwertyuiop", ID1)
    make_partition(d2, "no name", None)
    (d1 / "file-7").write_bytes(b"")
    (d1 / "meta.properties").write_text("version=1\n")
    make_partition(tmp_path, "outside", ID1)
    (d2 / "link-0").symlink_to(tmp_path / "outside", target_is_directory=True)
    return {(ID1, 0): "keep", (ID1, 1): "keep", (ID1, 2): "keep", (ID_B, 0): "A"}


def test_execute_matches_the_pure_model(d1: Path, d2: Path, tmp_path: Path) -> None:
    assigned = messy_disk(d1, d2, tmp_path)
    (d1 / DELETING_DIR).mkdir()
    make_partition(d1 / DELETING_DIR, "orphan", None)
    dirs = logdirs(d1, d2)
    scan = dirs.scan()
    plan = reconcile.plan_reconciliation(
        assigned=assigned,
        on_disk=scan.on_disk,
        pending_deletions=scan.pending_deletions,
        mode=FULL,
        log_dirs=dirs.log_dir_names,
        now_ms=NOW,
        delete_delay_ms=DELAY,
    )
    result = dirs.execute(plan)
    assert result.failures == ()
    model_disk, model_pending = apply_plan(scan.on_disk, scan.pending_deletions, plan)
    rescan = logdirs(d1, d2).scan()

    def disk_view(
        on_disk: tuple[LocalPartition, ...],
    ) -> set[tuple[str, str, EntryState, Uuid | None]]:
        return {(e.log_dir, e.dir_name, e.state, e.topic_id) for e in on_disk}

    assert disk_view(rescan.on_disk) == disk_view(model_disk)
    assert set(rescan.pending_deletions) == set(model_pending)  # size_bytes is not compared


def test_dry_run_describes_every_action_and_changes_nothing(
    d1: Path, d2: Path, tmp_path: Path
) -> None:
    assigned = messy_disk(d1, d2, tmp_path)
    before = (entries(d1), entries(d2))
    plan = logdirs(d1, d2).plan(assigned=assigned, mode=FULL, now_ms=NOW, delete_delay_ms=DELAY)
    rows = describe_plan(plan)
    assert (entries(d1), entries(d2)) == before
    json.dumps(rows)  # JSON-ready
    actions = [str(row["action"]) for row in rows]
    order = ["move_aside", "create"]
    assert actions == sorted(actions, key=order.index)
    moves = {row["dir"]: row for row in rows if row["action"] == "move_aside"}
    assert set(moves) == {
        "A-0",
        "gone-0",
        "nometa-0",
        "garbage-3",
        "foo-0.3fa9c2d1e0b4-stray",
        "foo-0.3fa9c2d1e0b4-delete",
        "keep-2.tmp-qwertyuiop",
        "no name",
        "file-7",
        "link-0",
    }
    assert moves["A-0"]["reason"] == "topic_id_mismatch"
    assert moves["A-0"]["destination"] == f"deleting/{ID0}_0"
    assert moves["A-0"]["delete_at"] == iso_time(NOW + DELAY)
    assert {row["dir"] for row in rows if row["action"] == "create"} == {"A-0", "keep-2"}


@pytest.fixture
def stray_invert(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(reconcile, "UNSAFE_STRAY_INVERT", True)
    yield


def run_full_and_check(d1: Path, d2: Path, tmp_path: Path) -> list[str]:
    assigned = messy_disk(d1, d2, tmp_path)
    before = snapshot_log_dirs([d1, d2])
    dirs = logdirs(d1, d2)
    _, result = reconcile_now(dirs, assigned)
    assert result.failures == ()
    violations = i11_violations(
        assigned=set(assigned), before=before, after=snapshot_log_dirs([d1, d2])
    )
    if not violations:
        assert reconcile_now(dirs, assigned, now_ms=NOW + 1)[0].is_empty, "idempotent on disk"
    return violations


def test_i11_holds_after_a_full_reconciliation_of_a_messy_disk(
    d1: Path, d2: Path, tmp_path: Path
) -> None:
    assert run_full_and_check(d1, d2, tmp_path) == []
    assert (d1 / "keep-0" / "00000000000000000000.log").read_bytes() == b"keep 0"
    assert (tmp_path / "outside" / "partition.metadata").is_file(), "symlink target untouched"


@pytest.mark.usefixtures("stray_invert")
def test_negative_control_stray_invert_is_caught_by_the_i11_checker(
    d1: Path, d2: Path, tmp_path: Path
) -> None:
    violations = run_full_and_check(d1, d2, tmp_path)
    assert any(v.startswith("I11a") for v in violations), violations
    assert any(v.startswith("I11b") for v in violations), violations
