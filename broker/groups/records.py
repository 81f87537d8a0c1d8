"""The records of ``__consumer_offsets`` in Kafka's own formats (docs/groups.md#records), so
that Kafka's ``kafka-dump-log --offsets-decoder`` reads what this broker writes, and the batches
that carry them.

A record's key starts with an int16 naming its type (the schema's ``apiKey``), its value with
an int16 version; both are Kafka's non-flexible encodings (int16-length strings, -1 for null;
int32-length bytes and arrays):

- ``OffsetCommitKey`` (type 1): group, topic, partition. ``OffsetCommitValue`` v3: offset,
  leader epoch, metadata, commit timestamp (Kafka writes v3 when no expire timestamp is given).
- ``GroupMetadataKey`` (type 2): group. ``GroupMetadataValue`` v3: protocol type, generation,
  protocol (nullable), leader (nullable), current state timestamp, members (member id, group
  instance id (nullable), client id, client host, rebalance timeout, session timeout,
  subscription, assignment).
- A null value is a tombstone: the offset or the group is gone (compaction keeps the last).

Batches are magic-2 record batches, uncompressed, without a producer id, as Kafka's
coordinator writes them (``build_batch``); ``iter_records`` reads them back, and gzip too.
Decoding is of bytes this broker or a replica wrote, but a log is still read defensively:
every failure is ``RecordFormatError``.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

import crc32c

__all__ = [
    "GROUP_METADATA_KEY_TYPE",
    "OFFSET_COMMIT_KEY_TYPE",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "MemberMetadata",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "RecordFormatError",
    "build_batch",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
    "iter_records",
]

OFFSET_COMMIT_KEY_TYPE: Final = 1  # Kafka also reads 0 (the same fields)
GROUP_METADATA_KEY_TYPE: Final = 2
OFFSET_COMMIT_VALUE_VERSION: Final = 3
GROUP_METADATA_VALUE_VERSION: Final = 3
MAGIC_V2: Final = 2
COMPRESSION_MASK: Final = 0x07
_BATCH_HEAD: Final = struct.Struct(">qiibI")  # base offset, length, epoch, magic, crc
_BATCH_REST: Final = struct.Struct(">hiqqqhii")  # attributes .. record count
BATCH_HEADER_BYTES: Final = _BATCH_HEAD.size + _BATCH_REST.size  # 61
# A compressed batch of the log is inflated to at most this much (our bound: a coordinator
# batch holds one request's records; Kafka's segment of 100 MiB bounds any batch anyway).
INFLATED_BYTES_MAX: Final = 128 * 1024 * 1024


class RecordFormatError(ValueError):
    """Bytes that are not a record or batch of these formats; the message says where."""


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int = -1  # v1 only


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int
    members: tuple[MemberMetadata, ...]


RecordKey = OffsetCommitKey | GroupMetadataKey
RecordValue = OffsetCommitValue | GroupMetadataValue


# ----- primitives ------------------------------------------------------------------------------


class _Writer:
    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def int16(self, value: int) -> None:
        self.parts.append(struct.pack(">h", value))

    def int32(self, value: int) -> None:
        self.parts.append(struct.pack(">i", value))

    def int64(self, value: int) -> None:
        self.parts.append(struct.pack(">q", value))

    def string(self, value: str | None) -> None:
        if value is None:
            self.int16(-1)
            return
        data = value.encode()
        if len(data) > 0x7FFF:
            raise RecordFormatError(f"a string of {len(data)} bytes; allowed: at most 32767")
        self.int16(len(data))
        self.parts.append(data)

    def bytes_(self, value: bytes) -> None:
        self.int32(len(value))
        self.parts.append(value)

    def value(self) -> bytes:
        return b"".join(self.parts)


class _Reader:
    def __init__(self, data: bytes, what: str) -> None:
        self.data = data
        self.at = 0
        self.what = what

    def _take(self, size: int) -> bytes:
        if size < 0 or self.at + size > len(self.data):
            raise RecordFormatError(
                f"{self.what}: {size} bytes wanted at {self.at} of {len(self.data)}"
            )
        chunk = self.data[self.at : self.at + size]
        self.at += size
        return chunk

    def int16(self) -> int:
        (value,) = struct.unpack(">h", self._take(2))
        return int(value)

    def int32(self) -> int:
        (value,) = struct.unpack(">i", self._take(4))
        return int(value)

    def int64(self) -> int:
        (value,) = struct.unpack(">q", self._take(8))
        return int(value)

    def nullable_string(self) -> str | None:
        length = self.int16()
        if length == -1:
            return None
        try:
            return self._take(length).decode()
        except UnicodeDecodeError as exc:
            raise RecordFormatError(f"{self.what}: a string is not UTF-8 ({exc})") from None

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise RecordFormatError(f"{self.what}: a null string where the schema has none")
        return value

    def bytes_(self) -> bytes:
        length = self.int32()
        return b"" if length == -1 else self._take(length)


# ----- keys and values -------------------------------------------------------------------------


def encode_key(key: RecordKey) -> bytes:
    out = _Writer()
    if isinstance(key, OffsetCommitKey):
        out.int16(OFFSET_COMMIT_KEY_TYPE)
        out.string(key.group)
        out.string(key.topic)
        out.int32(key.partition)
    else:
        out.int16(GROUP_METADATA_KEY_TYPE)
        out.string(key.group)
    return out.value()


def decode_key(data: bytes) -> RecordKey | None:
    """The key, or None for a record type this coordinator does not read (Kafka's newer
    consumer-group and share records, types 3 and up): skipped when loading."""
    read = _Reader(data, "record key")
    kind = read.int16()
    if kind in (0, OFFSET_COMMIT_KEY_TYPE):
        return OffsetCommitKey(read.string(), read.string(), read.int32())
    if kind == GROUP_METADATA_KEY_TYPE:
        return GroupMetadataKey(read.string())
    if kind < 0:
        raise RecordFormatError(f"record key type {kind}")
    return None


def encode_value(value: RecordValue) -> bytes:
    out = _Writer()
    if isinstance(value, OffsetCommitValue):
        out.int16(OFFSET_COMMIT_VALUE_VERSION)
        out.int64(value.offset)
        out.int32(value.leader_epoch)
        out.string(value.metadata)
        out.int64(value.commit_timestamp_ms)
        return out.value()
    out.int16(GROUP_METADATA_VALUE_VERSION)
    out.string(value.protocol_type)
    out.int32(value.generation)
    out.string(value.protocol)
    out.string(value.leader)
    out.int64(value.current_state_timestamp_ms)
    out.int32(len(value.members))
    for member in value.members:
        out.string(member.member_id)
        out.string(member.group_instance_id)
        out.string(member.client_id)
        out.string(member.client_host)
        out.int32(member.rebalance_timeout_ms)
        out.int32(member.session_timeout_ms)
        out.bytes_(member.subscription)
        out.bytes_(member.assignment)
    return out.value()


def decode_value(key: RecordKey, data: bytes) -> RecordValue:
    """The value of a record whose key is ``key``, at any of Kafka's non-flexible versions."""
    read = _Reader(data, "record value")
    version = read.int16()
    if isinstance(key, OffsetCommitKey):
        if not 0 <= version <= 3:
            raise RecordFormatError(f"OffsetCommitValue version {version}; read: 0-3")
        offset = read.int64()
        epoch = read.int32() if version >= 3 else -1
        metadata = read.string()
        committed = read.int64()
        expire = read.int64() if version == 1 else -1
        return OffsetCommitValue(offset, epoch, metadata, committed, expire)
    if not 0 <= version <= 3:
        raise RecordFormatError(f"GroupMetadataValue version {version}; read: 0-3")
    protocol_type = read.string()
    generation = read.int32()
    protocol = read.nullable_string()
    leader = read.nullable_string()
    timestamp = read.int64() if version >= 2 else -1
    count = read.int32()
    if count < 0 or count > len(data):
        raise RecordFormatError(f"GroupMetadataValue claims {count} members")
    members = []
    for _ in range(count):
        member_id = read.string()
        instance = read.nullable_string() if version >= 3 else None
        client_id = read.string()
        client_host = read.string()
        rebalance = read.int32() if version >= 1 else -1
        session = read.int32()
        members.append(
            MemberMetadata(
                member_id,
                instance,
                client_id,
                client_host,
                rebalance if rebalance >= 0 else session,
                session,
                read.bytes_(),
                read.bytes_(),
            )
        )
    return GroupMetadataValue(
        protocol_type, generation, protocol, leader, timestamp, tuple(members)
    )


# ----- batches ---------------------------------------------------------------------------------


def _varint(value: int) -> bytes:
    raw = ((value << 1) ^ (value >> 63)) & ((1 << 64) - 1)
    out = bytearray()
    while True:
        byte = raw & 0x7F
        raw >>= 7
        if not raw:
            out.append(byte)
            return bytes(out)
        out.append(byte | 0x80)


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    shift = raw = 0
    while True:
        if at >= len(data) or shift > 63:
            raise RecordFormatError("a varint runs past its record")
        byte = data[at]
        at += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), at
        shift += 7


def build_batch(records: list[tuple[bytes, bytes | None]], timestamp_ms: int) -> bytes:
    """One magic-2 batch of ``records`` (key, value or None for a tombstone), base offset 0 and
    no leader epoch (the log stamps both), CreateTime ``timestamp_ms``, uncompressed."""
    assert records
    body = bytearray()
    for delta, (key, value) in enumerate(records):
        record = bytearray(b"\x00")  # attributes
        record += _varint(0)  # timestamp delta
        record += _varint(delta)
        record += _varint(len(key)) + key
        record += _varint(-1) if value is None else _varint(len(value)) + value
        record += _varint(0)  # headers
        body += _varint(len(record)) + record
    rest = _BATCH_REST.pack(
        0, len(records) - 1, timestamp_ms, timestamp_ms, -1, -1, -1, len(records)
    ) + bytes(body)
    crc = crc32c.crc32c(rest)
    after_length = struct.pack(">ibI", -1, MAGIC_V2, crc) + rest
    return struct.pack(">qi", 0, len(after_length)) + after_length


def iter_records(data: bytes) -> Iterator[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record in the whole batches of ``data``; a partial batch
    at the end is ignored. Control batches are skipped. Raises ``RecordFormatError``."""
    at = 0
    while at + BATCH_HEADER_BYTES <= len(data):
        base_offset, length, _epoch, magic, crc = _BATCH_HEAD.unpack_from(data, at)
        end = at + 12 + length
        if length < BATCH_HEADER_BYTES - 12 or end > len(data):
            return
        if magic != MAGIC_V2:
            raise RecordFormatError(f"a batch of magic {magic} at offset {base_offset}")
        rest = data[at + _BATCH_HEAD.size : end]
        if crc32c.crc32c(rest) != crc:
            raise RecordFormatError(f"the batch at offset {base_offset} fails its CRC")
        attributes, _, _, _, _, _, _, count = _BATCH_REST.unpack_from(rest, 0)
        at = end
        if attributes & 0x20:  # a control batch (transaction markers)
            continue
        body = bytes(rest[_BATCH_REST.size :])
        compression = attributes & COMPRESSION_MASK
        if compression == 1:
            try:
                inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
                body = inflater.decompress(body, INFLATED_BYTES_MAX)
            except (zlib.error, gzip.BadGzipFile) as exc:
                raise RecordFormatError(f"the batch at {base_offset}: {exc}") from None
        elif compression != 0:
            raise RecordFormatError(
                f"the batch at offset {base_offset} is compressed ({compression}); read: none, gzip"
            )
        position = 0
        for _ in range(count):
            size, position = _read_varint(body, position)
            record_end = position + size
            if size < 0 or record_end > len(body):
                raise RecordFormatError(f"a record of the batch at {base_offset} is cut")
            position += 1  # attributes
            _, position = _read_varint(body, position)  # timestamp delta
            delta, position = _read_varint(body, position)
            key_length, position = _read_varint(body, position)
            key = None if key_length < 0 else body[position : position + key_length]
            position += max(key_length, 0)
            value_length, position = _read_varint(body, position)
            value = None if value_length < 0 else body[position : position + value_length]
            position = record_end
            yield base_offset + delta, key, value


def subscription_topics(metadata: bytes) -> set[str]:
    """The topics of a consumer's ``ConsumerProtocolSubscription`` (its JoinGroup metadata
    for protocol type "consumer": int16 version, then an int32-counted array of topic names, in
    every version); empty when it does not parse (OffsetDelete then protects nothing by it)."""
    read = _Reader(metadata, "subscription")
    try:
        read.int16()
        count = read.int32()
        if count < 0 or count > len(metadata):
            return set()
        return {read.string() for _ in range(count)}
    except RecordFormatError:
        return set()
