"""The ``partition.metadata`` file of a partition directory (KIP-516 "Storage"), pure.

Kafka's format, plain ``key: value`` lines, version 0::

    version: 0
    topic_id: 3Db5QLSqSZieL3rJBUUegA

The topic id is printed in Kafka's 22-character base64 form; on input the 36-character dashed
hex form is accepted too (``Uuid.parse``), and so is the 32-character undashed hex of the KIP's
own example (``topic_id: 46bdb63f9e8d4a38bf7bee4eb2a794e4``). Blank lines and surrounding
whitespace are tolerated; anything else (a missing key, a key given twice, an unknown key, an
unknown version, a reserved or malformed id, non-UTF-8 bytes, a NUL, a file larger than
``PARTITION_METADATA_BYTES_MAX``) raises ``InvalidPartitionMetadata`` naming the problem.

A file that cannot be parsed is never a reason to refuse to start (KAFKA-16814), and never a
reason to move a partition's data aside either (docs/architecture.md#brokers): under a name
assigned to the broker the directory is left in place and reported until an operator repairs it;
under a name not assigned here, a FULL reconciliation moves it aside as it does any stray. An
I/O error while reading the file is not a parse error: ``broker/logdirs.py`` retries it and stops
the broker if it persists. ``broker/logdirs.py`` writes the file
with a temp file, fsync and rename, inside a build directory that is renamed into place only after
the file is durable, so a partition directory created by this project always has one.
"""

from __future__ import annotations

import re
from typing import Final

from quorum.ids import RESERVED_UUIDS, InvalidUuidError, Uuid

PARTITION_METADATA_FILE: Final = "partition.metadata"
PARTITION_METADATA_VERSION: Final = 0
# A real file is 41 bytes. Refuse anything much larger before decoding it.
PARTITION_METADATA_BYTES_MAX: Final = 1024

_KNOWN_KEYS: Final = ("version", "topic_id")
_UNDASHED_HEX_RE: Final = re.compile(r"[0-9a-fA-F]{32}")


class InvalidPartitionMetadata(ValueError):
    """A ``partition.metadata`` file is not a valid version-0 file."""


def render(topic_id: Uuid) -> bytes:
    """The file's bytes for ``topic_id``, exactly as Kafka writes them."""
    assert topic_id not in RESERVED_UUIDS, f"{topic_id} is reserved and names no topic"
    return f"version: {PARTITION_METADATA_VERSION}\ntopic_id: {topic_id}\n".encode("ascii")


def parse(data: bytes) -> Uuid:
    """The topic id stored in a ``partition.metadata`` file's bytes."""
    if len(data) > PARTITION_METADATA_BYTES_MAX:
        raise InvalidPartitionMetadata(
            f"partition.metadata is {len(data)} bytes; a valid one is at most "
            f"{PARTITION_METADATA_BYTES_MAX} (it holds two short lines)"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidPartitionMetadata(
            f"partition.metadata is not UTF-8 text (bad byte at offset {exc.start})"
        ) from None
    if "\x00" in text:
        raise InvalidPartitionMetadata("partition.metadata contains NUL bytes")
    values: dict[str, str] = {}
    for line_number, raw_line in enumerate(text.splitlines(), start=1):
        line = raw_line.strip()
        if not line:
            continue
        key, sep, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise InvalidPartitionMetadata(
                f"partition.metadata line {line_number}: {raw_line!r} is not a 'key: value' line"
            )
        if key in values:
            raise InvalidPartitionMetadata(
                f"partition.metadata line {line_number}: {key!r} is given twice"
            )
        values[key] = value

    version = values.get("version")
    if version is None:
        raise InvalidPartitionMetadata("partition.metadata has no 'version' line")
    if version != str(PARTITION_METADATA_VERSION):
        raise InvalidPartitionMetadata(
            f"partition.metadata has version {version!r}; only version "
            f"{PARTITION_METADATA_VERSION} is known"
        )
    unknown = sorted(set(values) - set(_KNOWN_KEYS))
    if unknown:
        raise InvalidPartitionMetadata(
            f"partition.metadata has unknown keys {unknown}; version "
            f"{PARTITION_METADATA_VERSION} has only {', '.join(_KNOWN_KEYS)}"
        )
    id_text = values.get("topic_id")
    if id_text is None:
        raise InvalidPartitionMetadata("partition.metadata has no 'topic_id' line")
    topic_id = _parse_topic_id(id_text)
    if topic_id in RESERVED_UUIDS:
        raise InvalidPartitionMetadata(
            f"partition.metadata topic_id {id_text!r} is reserved and names no topic"
        )
    return topic_id


def _parse_topic_id(text: str) -> Uuid:
    try:
        if _UNDASHED_HEX_RE.fullmatch(text):
            return Uuid.from_bytes(bytes.fromhex(text))
        return Uuid.parse(text)
    except InvalidUuidError:
        raise InvalidPartitionMetadata(
            f"partition.metadata topic_id {text!r} is not a topic id (22 characters of "
            "URL-safe base64, e.g. 'AAAAAAAAAAAAAAAAAAAAAQ')"
        ) from None
