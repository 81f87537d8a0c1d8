"""The bootstrap voter set a controller is formatted with (KIP-853).

``metaquorum storage format --standalone`` (a one-controller quorum to grow from) or
``--initial-controllers 1@host:port:DIRID,...`` writes ``bootstrap.checkpoint`` into the
metadata partition directory (``metadata.log.dir/__cluster_metadata-0/``): one framed control
batch (length, CRC32C, ``quorum/storage/frames.py``) holding a ``KRaftVersionRecord``
(kraft.version 1) and the ``VotersRecord`` of the first voters. Kafka writes the same records
into ``00000000000000000000-0000000000.checkpoint``; this project keeps them apart from the
snapshots so snapshot listing, retention and FetchSnapshot never see it.

A controller reads it at start-up only while its log holds no ``VotersRecord`` of its own: the
first leader writes the bootstrap set into the log at its epoch start, and from then on the log
is what counts (``quorum.raft.voters``). A controller formatted with
``--no-initial-controllers`` has no such file: it starts as an observer and learns the voters
from the log it fetches.

Written like every file that must survive a crash: to a temporary file, fsynced, renamed over
the target, directory fsynced.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from quorum.metadata.batch import encode_batch
from quorum.metadata.records import KRaftVersionRecord, RecordDecodeError
from quorum.raft.voters import KRAFT_VERSION_DYNAMIC, VoterSet, voter_changes_in
from quorum.storage import fsutil
from quorum.storage.errors import StorageError
from quorum.storage.frames import CorruptFrameError, encode_frame, read_stream_frames

BOOTSTRAP_CHECKPOINT_FILE: Final = "bootstrap.checkpoint"
# The metadata log's partition directory under metadata.log.dir (quorum/server/raft_manager.py).
METADATA_PARTITION_DIR: Final = "__cluster_metadata-0"


class CorruptBootstrapError(StorageError):
    """``bootstrap.checkpoint`` cannot be read; the message says how to recover."""


def partition_dir_of(metadata_log_dir: Path) -> Path:
    return metadata_log_dir / METADATA_PARTITION_DIR


def bootstrap_path(partition_dir: Path) -> Path:
    return partition_dir / BOOTSTRAP_CHECKPOINT_FILE


def write_bootstrap(partition_dir: Path, voters: VoterSet) -> Path:
    """Write the bootstrap voter set durably (kraft.version 1); returns the file's path."""
    assert voters, "a bootstrap voter set has at least one voter"
    batch = encode_batch(
        base_offset=0,
        epoch=0,
        timestamp_ms=0,
        records=[KRaftVersionRecord(0, KRAFT_VERSION_DYNAMIC), voters.to_record()],
        control=True,
    )
    fsutil.ensure_directory(partition_dir)
    path = bootstrap_path(partition_dir)
    fsutil.write_file_atomically(path, encode_frame(batch))
    return path


def read_bootstrap(partition_dir: Path) -> tuple[int, VoterSet] | None:
    """The kraft.version and voter set of ``bootstrap.checkpoint``; None when there is none.
    Raises ``CorruptBootstrapError`` for a file that is damaged or holds anything else."""
    path = bootstrap_path(partition_dir)
    tmp = fsutil.tmp_path_for(path)
    if tmp.exists():  # a format that crashed before its rename: never in force
        tmp.unlink()
    try:
        file = path.open("rb")
    except FileNotFoundError:
        return None
    with file:
        try:
            frames = list(read_stream_frames(path, file))
            if len(frames) != 1:
                raise CorruptBootstrapError(f"{path} holds {len(frames)} batches, not one")
            kraft_version, voters = voter_changes_in(frames[0][1])
        except (CorruptFrameError, RecordDecodeError) as exc:
            raise CorruptBootstrapError(
                f"{path} is damaged ({exc}); if the log next to it already holds the voter set "
                "(a leader was elected), remove the file; otherwise format the controller again"
            ) from exc
    if kraft_version is None or not voters:
        raise CorruptBootstrapError(
            f"{path} holds no KRaftVersionRecord and VotersRecord; format the controller again"
        )
    return kraft_version, voters


__all__ = [
    "BOOTSTRAP_CHECKPOINT_FILE",
    "METADATA_PARTITION_DIR",
    "CorruptBootstrapError",
    "bootstrap_path",
    "partition_dir_of",
    "read_bootstrap",
    "write_bootstrap",
]
