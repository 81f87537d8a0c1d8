"""The data-directory lock (``quorum/storage/dirlock.py``): one process per directory, the
holder named by pid, released by the kernel when the holder dies (also after kill -9)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from quorum.cli import main
from quorum.harness import REPO
from quorum.limits import LOCK_FILE_BYTES_MAX
from quorum.storage.dirlock import (
    LOCK_FILE_NAME,
    DirectoryLockedError,
    DirectoryLockError,
    lock_directories,
    lock_directory,
    read_holder_pid,
)

# A child process that locks the directory given as argv[1], says so, and waits for stdin to
# close (or to be killed).
HOLDER = """
import sys
from pathlib import Path
from quorum.storage.dirlock import lock_directory
lock = lock_directory(Path(sys.argv[1]))
print("locked", flush=True)
sys.stdin.read()
"""

# A child process that tries to lock argv[1] and reports the outcome.
CONTENDER = """
import sys
from pathlib import Path
from quorum.storage.dirlock import DirectoryLockedError, lock_directory
try:
    lock_directory(Path(sys.argv[1]))
except DirectoryLockedError as exc:
    print("locked-by", exc.holder_pid)
    print(exc)
else:
    print("acquired")
"""


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "locked"  # blocks until the lock is held
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)


def contend(directory: Path) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", CONTENDER, str(directory)],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=60,
        check=True,
    )
    return result.stdout.splitlines()


def file_state(path: Path) -> tuple[bytes, int, int]:
    st = path.stat()
    return path.read_bytes(), st.st_size, st.st_mtime_ns


def test_a_second_process_is_refused_and_named_the_holder(
    tmp_path: Path, holder: subprocess.Popen[str]
) -> None:
    lock_file = tmp_path / LOCK_FILE_NAME
    assert read_holder_pid(tmp_path) == holder.pid
    before = file_state(lock_file)
    lines = contend(tmp_path)
    assert lines[0] == f"locked-by {holder.pid}"
    assert str(tmp_path) in lines[1] and f"process {holder.pid}" in lines[1]
    assert file_state(lock_file) == before  # the failed attempt changed nothing
    assert sorted(p.name for p in tmp_path.iterdir()) == [LOCK_FILE_NAME]


def test_the_lock_is_released_when_the_holder_is_killed_9(
    tmp_path: Path, holder: subprocess.Popen[str]
) -> None:
    with pytest.raises(DirectoryLockedError):
        lock_directory(tmp_path)
    holder.send_signal(signal.SIGKILL)
    assert holder.wait(timeout=10) == -signal.SIGKILL
    lock = lock_directory(tmp_path)  # the kernel dropped the dead process's flock
    assert read_holder_pid(tmp_path) == os.getpid()
    assert contend(tmp_path)[0] == f"locked-by {os.getpid()}"
    lock.release()
    assert contend(tmp_path) == ["acquired"]


def test_two_locks_in_one_process_conflict_and_release_frees(tmp_path: Path) -> None:
    lock = lock_directory(tmp_path)
    with pytest.raises(DirectoryLockedError) as caught:
        lock_directory(tmp_path)
    assert caught.value.holder_pid == os.getpid()
    lock.release()
    lock.release()  # idempotent
    assert not lock.held
    lock_directory(tmp_path).release()


def test_lock_directories_takes_all_or_none(tmp_path: Path) -> None:
    dirs = [tmp_path / name for name in ("a", "b", "c")]
    for directory in dirs:
        directory.mkdir()
    held = lock_directory(dirs[2])
    with pytest.raises(DirectoryLockedError):
        lock_directories(dirs)
    # a and b were released when c failed.
    lock_directories(dirs[:2])
    held.release()


def test_junk_in_the_lock_file_is_not_echoed(tmp_path: Path) -> None:
    (tmp_path / LOCK_FILE_NAME).write_bytes(b"\n\x1b[31mnot a pid" * 100)
    lock = lock_directory(tmp_path)
    (tmp_path / LOCK_FILE_NAME).write_bytes(b"-5\n")
    assert read_holder_pid(tmp_path) is None
    with pytest.raises(DirectoryLockedError) as caught:
        lock_directory(tmp_path)
    assert caught.value.holder_pid is None
    assert "another process" in str(caught.value)
    (tmp_path / LOCK_FILE_NAME).write_bytes(b"9" * (LOCK_FILE_BYTES_MAX + 10))
    assert read_holder_pid(tmp_path) is None
    lock.release()


def test_a_lock_file_that_is_a_symlink_or_a_missing_directory_is_an_error(
    tmp_path: Path,
) -> None:
    (tmp_path / LOCK_FILE_NAME).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(DirectoryLockError, match="errno"):
        lock_directory(tmp_path)
    assert not (tmp_path / "elsewhere").exists()
    with pytest.raises(DirectoryLockError, match="cannot lock data directory"):
        lock_directory(tmp_path / "missing")


def test_storage_format_refuses_a_directory_a_node_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    config = tmp_path / "c.toml"
    config.write_text(
        '"node.id" = 1\n"process.roles" = ["controller"]\n'
        '"controller.quorum.voters" = ["1@127.0.0.1:9999"]\n'
        '"listeners" = ["CONTROLLER://127.0.0.1:9999"]\n'
        f'"metadata.log.dir" = "{data}"\n'
    )
    args = ["storage", "format", "--config", str(config), "--cluster-id", "MkU3OEVBNTcwNTJENDM2Qg"]
    lock = lock_directory(data)
    assert main(args) == 1
    err = capsys.readouterr().err
    assert str(data) in err and f"process {os.getpid()}" in err
    assert sorted(p.name for p in data.iterdir()) == [LOCK_FILE_NAME]
    lock.release()
    # Free again: the leftover .lock file does not make the directory "not empty".
    assert main(args) == 0
    assert (data / "meta.properties").exists()
