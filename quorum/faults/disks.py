"""Disk faults on real processes: a small tmpfs that fills up (ENOSPC) and libfiu's POSIX
preload (Debian's fiu-utils) to make fsync or writes fail with EIO in a running node.

A node to be broken by fiu is started under ``fiu_prefix()`` (``fiu-run -x``: libfiu preloaded,
remote control on, nothing failing yet); ``fiu_enable(pid, ...)`` then makes every call to a
failure point fail from that moment. ``fiu-run`` execs the command, so the pid of the started
process is the node's. What is available here is said by ``fiu_available`` and
``tmpfs_available`` (a reason, or None), so a test can skip with it.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

FIU_RUN = shutil.which("fiu-run")
FIU_CTRL = shutil.which("fiu-ctrl")
# libfiu's names for the calls the metadata log makes durable with (quorum/storage/fsutil.py
# uses fdatasync for segments, fsync for directories and small files).
FSYNC_POINTS = ("posix/io/sync/fdatasync", "posix/io/sync/fsync")
# libfiu's name for pwrite(2): partition logs write their segments and indexes with it
# (quorum/storage/fsutil.py's write_all), while the process's own log lines go through write(2),
# so failing it fails appends and leaves the node able to say what happened.
PWRITE_POINT = "posix/io/rw/pwrite"
BALLAST_FILE = "ballast.fill"


def fiu_available() -> str | None:
    """None if fiu-run and fiu-ctrl are here, else why not."""
    if FIU_RUN is None or FIU_CTRL is None:
        return (
            "needs Debian's fiu-utils (fiu-run, fiu-ctrl); scripts/test installs it when run "
            "as root with apt-get available"
        )
    return None


def fiu_prefix() -> tuple[str, ...]:
    """The command prefix that starts a node with libfiu preloaded and remote control on."""
    assert FIU_RUN is not None, fiu_available()
    return (FIU_RUN, "-x")


def fiu_enable(pid: int, name: str, error: int = errno.EIO) -> None:
    """From now on, every call to failure point ``name`` in process ``pid`` fails (``errno``)."""
    assert FIU_CTRL is not None, fiu_available()
    subprocess.run(
        [FIU_CTRL, "-c", f"enable name={name},failinfo={error}", str(pid)],
        check=True,
        timeout=10,
        capture_output=True,
    )


def fiu_disable(pid: int, name: str) -> None:
    """Failure point ``name`` in process ``pid`` works again."""
    assert FIU_CTRL is not None, fiu_available()
    subprocess.run(
        [FIU_CTRL, "-c", f"disable name={name}", str(pid)],
        check=True,
        timeout=10,
        capture_output=True,
    )


@functools.cache
def tmpfs_available() -> str | None:
    """None if this process can mount a tmpfs (tried once, on a scratch directory), else why
    not: not root, no mount(8), or a container that refuses mounts."""
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root (scripts/test runs as root in CI)"
    if shutil.which("mount") is None or shutil.which("umount") is None:
        return "mount/umount are not installed"
    with tempfile.TemporaryDirectory(prefix="tmpfs-probe-") as scratch:
        try:
            with tmpfs(Path(scratch), 1 << 20):
                pass
        except subprocess.CalledProcessError as exc:
            return f"mount -t tmpfs was refused here: {exc.stderr.decode(errors='replace')}"
    return None


@contextlib.contextmanager
def tmpfs(path: Path, size_bytes: int) -> Iterator[Path]:
    """A tmpfs of ``size_bytes`` mounted at ``path`` (created if missing), unmounted at exit
    (lazily if a process still holds a file there)."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(path)],
        check=True,
        timeout=10,
        capture_output=True,
    )
    try:
        yield path
    finally:
        unmounted = subprocess.run(
            ["umount", str(path)], check=False, timeout=10, capture_output=True
        )
        if unmounted.returncode != 0:
            subprocess.run(["umount", "-l", str(path)], check=False, timeout=10)


def fill(path: Path, leave_bytes: int = 0) -> int:
    """Fill the filesystem of ``path`` with a ballast file until at most ``leave_bytes`` are
    free; returns the bytes written."""
    ballast = path / BALLAST_FILE
    written = 0
    chunk = b"\0" * 65_536
    with ballast.open("ab") as out:
        while True:
            free = shutil.disk_usage(path).free
            if free <= leave_bytes:
                break
            try:
                out.write(chunk[: max(1, min(len(chunk), free - leave_bytes))])
                out.flush()
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
            written += min(len(chunk), free - leave_bytes)
    return written


def release(path: Path) -> None:
    """Remove the ballast ``fill`` wrote."""
    (path / BALLAST_FILE).unlink(missing_ok=True)
