"""Kafka's checkpoint files, in Kafka's text format (``CheckpointFile``), written atomically.

Two kinds, both a version line (``0``), a count line and one entry per line:

- a log dir's ``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint`` and
  ``replication-offset-checkpoint`` (high watermarks): one ``{topic} {partition} {offset}``
  line per partition of that log dir;
- a partition's ``leader-epoch-checkpoint``: one ``{epoch} {start_offset}`` line per leader
  epoch, in increasing order of both.

Written as every checkpoint of this project is (``quorum.storage.fsutil.write_file_atomically``:
a ``.tmp`` file, fsync, rename, fsync of the directory), so a crash leaves the old file or the
new one. Read with a bound on the bytes (``LOG_CHECKPOINT_BYTES_MAX``) and strictly: a file
that is not one this module (or Kafka) wrote raises ``CheckpointError`` naming the line; the
callers then fall back to what is safe (recovering everything, the first segment's offset).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

from quorum.limits import LOG_CHECKPOINT_BYTES_MAX
from quorum.storage.fsutil import write_file_atomically

__all__ = [
    "CLEANER_OFFSET_CHECKPOINT",
    "LEADER_EPOCH_CHECKPOINT",
    "LOG_START_OFFSET_CHECKPOINT",
    "RECOVERY_POINT_CHECKPOINT",
    "REPLICATION_OFFSET_CHECKPOINT",
    "CheckpointError",
    "read_epoch_checkpoint",
    "read_offset_checkpoint",
    "write_epoch_checkpoint",
    "write_offset_checkpoint",
]

RECOVERY_POINT_CHECKPOINT: Final = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT: Final = "log-start-offset-checkpoint"
# Kafka's name for the high watermarks (ReplicaManager's HighwaterMarkCheckpoint).
REPLICATION_OFFSET_CHECKPOINT: Final = "replication-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT: Final = "leader-epoch-checkpoint"
# Where each compacted log's dirty section starts: the end of its last clean (Kafka's file).
CLEANER_OFFSET_CHECKPOINT: Final = "cleaner-offset-checkpoint"
CHECKPOINT_VERSION: Final = 0


class CheckpointError(ValueError):
    """A checkpoint file that is not in Kafka's format (the message names the file and line)."""


def _read_lines(path: Path) -> list[str] | None:
    """The entry lines of ``path`` after its version and count, or None when it is missing."""
    try:
        with open(path, "rb") as file:
            data = file.read(LOG_CHECKPOINT_BYTES_MAX + 1)
    except FileNotFoundError:
        return None
    if len(data) > LOG_CHECKPOINT_BYTES_MAX:
        raise CheckpointError(f"{path} is over {LOG_CHECKPOINT_BYTES_MAX} bytes")
    try:
        lines = data.decode("ascii").split("\n")
    except UnicodeDecodeError:
        raise CheckpointError(f"{path} is not ASCII text") from None
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) < 2 or lines[0] != str(CHECKPOINT_VERSION):
        raise CheckpointError(f"{path}: the first line is not version {CHECKPOINT_VERSION}")
    if not lines[1].isdigit() or int(lines[1]) != len(lines) - 2:
        raise CheckpointError(
            f"{path}: the count line says {lines[1]!r} but {len(lines) - 2} entries follow"
        )
    return lines[2:]


def _number(path: Path, line_number: int, text: str) -> int:
    body = text[1:] if text.startswith("-") else text
    if not body.isdigit() or not body.isascii():
        raise CheckpointError(f"{path} line {line_number}: {text!r} is not an integer")
    return int(text)


def read_offset_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """(topic, partition) -> offset of a log dir's offset checkpoint ({} when missing)."""
    lines = _read_lines(path)
    entries: dict[tuple[str, int], int] = {}
    for number, line in enumerate(lines or (), start=3):
        fields = line.split(" ")
        if len(fields) != 3 or not fields[0]:
            raise CheckpointError(f"{path} line {number}: {line[:300]!r} is not 'topic p offset'")
        entries[(fields[0], _number(path, number, fields[1]))] = _number(path, number, fields[2])
    return entries


def write_offset_checkpoint(path: Path, entries: Mapping[tuple[str, int], int]) -> None:
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    lines += [
        f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(entries.items())
    ]
    write_file_atomically(path, ("\n".join(lines) + "\n").encode("ascii"))


def read_epoch_checkpoint(path: Path) -> list[tuple[int, int]]:
    """(epoch, start offset) of a partition's ``leader-epoch-checkpoint`` ([] when missing),
    refused unless both increase strictly from line to line."""
    lines = _read_lines(path)
    entries: list[tuple[int, int]] = []
    for number, line in enumerate(lines or (), start=3):
        fields = line.split(" ")
        if len(fields) != 2:
            raise CheckpointError(f"{path} line {number}: {line[:100]!r} is not 'epoch offset'")
        epoch, start = _number(path, number, fields[0]), _number(path, number, fields[1])
        if epoch < 0 or start < 0 or (entries and (epoch, start) <= entries[-1]):
            raise CheckpointError(
                f"{path} line {number}: epoch {epoch} at offset {start} does not follow "
                f"{entries[-1] if entries else 'nothing'} (both must increase)"
            )
        entries.append((epoch, start))
    return entries


def write_epoch_checkpoint(path: Path, entries: Iterable[tuple[int, int]]) -> None:
    listed = list(entries)
    lines = [str(CHECKPOINT_VERSION), str(len(listed))]
    lines += [f"{epoch} {start}" for epoch, start in listed]
    write_file_atomically(path, ("\n".join(lines) + "\n").encode("ascii"))


def remove_stale_tmp(directory: Path, name: str) -> None:
    """Remove a ``{name}.tmp`` a crash left in ``directory`` (``write_file_atomically``'s)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(directory / f"{name}.tmp")
