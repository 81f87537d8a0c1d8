"""Errors raised by the storage layer.

Two families, following docs/conventions.md#errors:

- ``StorageError`` and its subclasses: the disk holds something we cannot use (corruption, a
  log that failed an earlier write). These are operating errors of this node, not of a peer: the
  node must stop and an operator must act (the message says what to do). They are never
  retriable.
- ``StorageInvariantError``: the caller broke a contract of the log or the election store (an
  offset gap on append, a truncation below the high watermark, a second vote in one epoch).
  That is our own bug, so it is an ``AssertionError`` and deliberately *not* a
  ``StorageError``: nobody should catch it as an operating condition.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

# Said by every corruption error: the only repair is to re-replicate from the other voters.
_WIPE_ADVICE = (
    "the data cannot be repaired in place: stop this node, move its metadata log directory "
    "{directory} aside (keep it for diagnosis) and restart the node empty so that it fetches "
    "the log again from the other voters"
)


class StorageError(Exception):
    """The local disk holds something this node cannot use. Never retriable."""

    retriable: ClassVar[bool] = False


class CorruptLogError(StorageError):
    """A segment of the metadata log is damaged somewhere other than its torn tail.

    ``path`` names the segment file and ``byte_offset`` the position of the first bad byte the
    recovery scan found (``None`` when the problem is the file as a whole, e.g. its name).
    """

    def __init__(self, path: Path, byte_offset: int | None, problem: str) -> None:
        self.path = path
        self.byte_offset = byte_offset
        self.problem = problem
        where = f"{path}" if byte_offset is None else f"{path} at byte {byte_offset}"
        advice = _WIPE_ADVICE.format(directory=path.parent)
        super().__init__(f"corrupt metadata log segment {where}: {problem}; {advice}")


class CorruptElectionStateError(StorageError):
    """The ``quorum-state`` file exists but cannot be trusted."""

    def __init__(self, path: Path, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(
            f"corrupt election state file {path}: {problem}; refusing to start, because voting "
            "without the persisted epoch and vote could elect two leaders in one epoch. "
            f"Restore the node as a wiped node: {_WIPE_ADVICE.format(directory=path.parent)}"
        )


class LogFailedError(StorageError):
    """An earlier write or fsync of the log failed; the log refuses further use.

    After a failed fsync the kernel may have dropped the dirty pages, so retrying could report
    data durable that is not ("fsyncgate"). The only safe continuation is a restart, which runs
    recovery from what is really on disk.
    """


class StorageInvariantError(AssertionError):
    """The caller broke a precondition of storage. This is a bug: let the process crash."""
