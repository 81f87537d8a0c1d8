"""Disk storage of a controller: the segmented metadata log and the election-state file.

The only package in the project that fsyncs (through ``quorum.storage.fsutil``).
"""

from quorum.storage.election_store import QUORUM_STATE_FILE_NAME, ElectionStore
from quorum.storage.errors import (
    CorruptElectionStateError,
    CorruptLogError,
    LogFailedError,
    StorageError,
    StorageInvariantError,
)
from quorum.storage.frames import FRAME_LENGTH_MAX, CorruptFrameError
from quorum.storage.log import SegmentedLog, SegmentInfo

__all__ = [
    "FRAME_LENGTH_MAX",
    "QUORUM_STATE_FILE_NAME",
    "CorruptElectionStateError",
    "CorruptFrameError",
    "CorruptLogError",
    "ElectionStore",
    "LogFailedError",
    "SegmentInfo",
    "SegmentedLog",
    "StorageError",
    "StorageInvariantError",
]
