"""The project's only fsync calls, and small helpers around them.

Everything that must survive a power loss goes through ``fsync_fd`` (file contents and size)
and ``fsync_directory`` (creations, renames and deletions of directory entries). Keeping them in
one module gives the negative control below a single switch and makes every durability point
easy to find with grep.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

# Negative control (docs/invariants.md#negative-controls): when True, the fsync helpers return
# without syncing and report that they did not, so callers keep *claiming* durability while the
# power-loss emulation (``SegmentedLog.simulate_crash``) shows the data was never durable. A test
# that turns this on must see I6/I8 fail under F12. Never set outside tests.
UNSAFE_SKIP_FSYNC = False

# A fault of the fault harness (docs/faults.md): a slow disk. Read once at start-up from the
# environment; every ``fsync_fd`` then takes this much longer. Zero (unset) costs nothing.
TEST_FSYNC_DELAY_ENV = "METAQUORUM_TEST_FSYNC_DELAY_MS"
_TEST_FSYNC_DELAY_S = int(os.environ.get(TEST_FSYNC_DELAY_ENV, "0") or 0) / 1000


def fsync_fd(fd: int) -> bool:
    """Make the contents and size of the open file ``fd`` durable.

    Returns True when the data really reached stable storage, False only under
    ``UNSAFE_SKIP_FSYNC``. Raises ``OSError`` (EIO, ENOSPC) on failure; callers must then treat
    the file as lost and never retry the fsync (a failed fsync may have dropped the dirty pages).
    """
    if UNSAFE_SKIP_FSYNC:
        return False
    if _TEST_FSYNC_DELAY_S:
        time.sleep(_TEST_FSYNC_DELAY_S)  # the log flush runs in a worker thread
    # fdatasync also flushes the metadata needed to read the data back (the file size), which is
    # all a log append needs; mtime is not worth a journal commit.
    os.fdatasync(fd)
    return True


def fsync_directory(directory: Path) -> bool:
    """Make the entries of ``directory`` (created, renamed, deleted files) durable."""
    if UNSAFE_SKIP_FSYNC:
        return False
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return True


def write_all(fd: int, data: bytes | bytearray | memoryview, position: int) -> None:
    """Write all of ``data`` at ``position`` of ``fd`` (``pwrite`` may write less than asked)."""
    view = memoryview(data)
    written_total = 0
    # Each pass writes at least one byte or raises, so this loop runs at most len(data) times.
    while written_total < len(view):
        written = os.pwrite(fd, view[written_total:], position + written_total)
        assert written > 0, "pwrite wrote nothing on a regular file"
        written_total += written


def ensure_directory(directory: Path) -> None:
    """Create ``directory`` and any missing parents, making each new entry durable."""
    missing: list[Path] = []
    current = directory
    while not current.exists():
        missing.append(current)
        assert current.parent != current, f"cannot create {directory}: no existing ancestor"
        current = current.parent
    for path in reversed(missing):
        # exist_ok: another process may create it at the same time; that is fine.
        path.mkdir(exist_ok=True)
        fsync_directory(path.parent)


def write_file_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves either the old or the new file.

    Writes ``<name>.tmp``, fsyncs it, renames it over ``path`` and fsyncs the directory. A crash
    can leave the ``.tmp`` behind; readers ignore and remove it.
    """
    tmp_path = tmp_path_for(path)
    fd = os.open(tmp_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        write_all(fd, data, 0)
        fsync_fd(fd)
    finally:
        os.close(fd)
    os.replace(tmp_path, path)
    fsync_directory(path.parent)


def tmp_path_for(path: Path) -> Path:
    """The temporary file ``write_file_atomically`` writes before renaming it over ``path``."""
    return path.with_name(path.name + ".tmp")
