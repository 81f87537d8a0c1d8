"""One process per data directory: the ``.lock`` file (Kafka's ``LogManager.lockLogDirs``).

A node takes an exclusive ``fcntl.flock`` on ``{directory}/.lock`` for every data directory
(``metadata.log.dir`` and every ``log.dirs`` entry) before anything reads or repairs the
directory (docs/architecture.md#on-disk-formats), and holds it for the life of the process.
``storage format`` takes the same locks before it decides anything. The kernel releases a flock
when the process dies, also after kill -9, so a stale ``.lock`` file never blocks a restart; the
file itself is left in place.

After locking, the holder writes its pid into the file, so that a second process can say who
holds the directory. A process that fails to lock changes nothing: it opens the existing file
without truncating it, reads at most ``LOCK_FILE_BYTES_MAX`` bytes and closes it. (When the file
does not exist yet, opening creates it empty: no node ran on the directory.)

flock locks belong to an open file description, so two ``lock_directory`` calls on one
directory conflict even inside one process.
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from quorum.limits import LOCK_FILE_BYTES_MAX
from quorum.storage.errors import StorageError

LOCK_FILE_NAME: Final = ".lock"
_OPEN_FLAGS: Final = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_LOCK_FILE_MODE: Final = 0o644


class DirectoryLockedError(StorageError):
    """Another process holds the lock of a data directory. ``holder_pid`` is None when the
    lock file does not name one (an older holder, or bytes that are not a pid)."""

    def __init__(self, directory: Path, holder_pid: int | None) -> None:
        self.directory = directory
        self.holder_pid = holder_pid
        holder = f"process {holder_pid}" if holder_pid is not None else "another process"
        super().__init__(
            f"data directory {directory} is locked by {holder} ({directory / LOCK_FILE_NAME}): "
            "a node is already running on it. Stop that process first; two processes on one "
            "directory would corrupt it. Nothing in the directory was read or changed."
        )


class DirectoryLockError(StorageError):
    """The lock file of a data directory cannot be opened or locked (not a lock conflict)."""

    def __init__(self, directory: Path, error: OSError) -> None:
        self.directory = directory
        self.errno = error.errno
        super().__init__(
            f"cannot lock data directory {directory}: {directory / LOCK_FILE_NAME}: "
            f"{error.strerror or error} (errno {error.errno}). Check that the directory is "
            "writable by this user and that .lock is a regular file."
        )


class DirLock:
    """A held lock on one data directory; ``release`` (or process exit) drops it."""

    def __init__(self, directory: Path, fd: int) -> None:
        self.directory = directory
        self._fd: int | None = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Drop the lock (idempotent). The file stays: removing it would race a new holder."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the last descriptor releases the flock


def lock_directory(directory: Path) -> DirLock:
    """Lock ``directory`` (which must exist) for this process, or raise
    ``DirectoryLockedError`` naming the holder's pid, or ``DirectoryLockError``."""
    path = directory / LOCK_FILE_NAME
    try:
        fd = os.open(path, _OPEN_FLAGS, _LOCK_FILE_MODE)
    except OSError as exc:
        raise DirectoryLockError(directory, exc) from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise DirectoryLockedError(directory, _read_pid(fd)) from None
            raise DirectoryLockError(directory, exc) from exc
        # Ours now: say who holds it (not fsynced; it only serves error messages).
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
    except BaseException:
        os.close(fd)
        raise
    return DirLock(directory, fd)


def lock_directories(directories: Iterable[Path]) -> list[DirLock]:
    """Lock every directory, in order; on a failure release those taken and raise."""
    locks: list[DirLock] = []
    try:
        for directory in directories:
            locks.append(lock_directory(directory))
    except BaseException:
        release_all(locks)
        raise
    return locks


def release_all(locks: Iterable[DirLock]) -> None:
    for lock in locks:
        lock.release()


def read_holder_pid(directory: Path) -> int | None:
    """The pid written in ``directory/.lock`` (for tests and messages), or None."""
    try:
        fd = os.open(directory / LOCK_FILE_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return _read_pid(fd)
    finally:
        os.close(fd)


def _read_pid(fd: int) -> int | None:
    try:
        data = os.pread(fd, LOCK_FILE_BYTES_MAX, 0)
    except OSError:
        return None
    text = data.decode("ascii", "replace").strip()
    if not text.isdigit() or len(text) > 10:
        return None
    pid = int(text)
    return pid if pid > 0 else None
