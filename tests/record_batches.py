"""A client-side encoder and decoder of Kafka record batches (magic v2), written from the
format's documented layout (https://kafka.apache.org/documentation/#recordbatch), for the
tests of the partition logs and of Produce / Fetch over the raw wire. Independent of
``broker/log/batch.py`` on purpose: a test that encoded with the code under test would prove
nothing about the format.
"""

from __future__ import annotations

import gzip
import struct
from dataclasses import dataclass, field

import crc32c


def varint(value: int) -> bytes:
    """Kafka's zig-zag varint (ByteUtils.writeVarlong)."""
    raw = (value << 1) ^ (value >> 63)
    raw &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = raw & 0x7F
        raw >>= 7
        if raw:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def read_varint(data: bytes, position: int) -> tuple[int, int]:
    shift = raw = 0
    while True:
        byte = data[position]
        position += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), position
        shift += 7


@dataclass(frozen=True)
class Record:
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[tuple[str, bytes | None], ...] = field(default=())
    offset: int = -1


def _bytes_field(value: bytes | None) -> bytes:
    return varint(-1) if value is None else varint(len(value)) + value


def encode_record(record: Record, offset_delta: int, base_timestamp: int) -> bytes:
    body = bytearray(b"\x00")  # attributes
    body += varint(record.timestamp - base_timestamp)
    body += varint(offset_delta)
    body += _bytes_field(record.key)
    body += _bytes_field(record.value)
    body += varint(len(record.headers))
    for name, value in record.headers:
        body += _bytes_field(name.encode())
        body += _bytes_field(value)
    return varint(len(body)) + bytes(body)


def encode_batch(
    records: list[Record],
    *,
    base_offset: int = 0,
    leader_epoch: int = -1,
    compression: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    attributes_extra: int = 0,
) -> bytes:
    """One batch holding ``records`` as a producer sends it (base offset 0, no epoch)."""
    base_timestamp = records[0].timestamp
    max_timestamp = max(r.timestamp for r in records)
    body = b"".join(encode_record(r, i, base_timestamp) for i, r in enumerate(records))
    if compression == 1:
        body = gzip.compress(body)
    attributes = compression | attributes_extra
    after_crc = (
        struct.pack(
            ">hiqqqhii",
            attributes,
            len(records) - 1,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
        + body
    )
    crc = crc32c.crc32c(after_crc)
    after_length = struct.pack(">ibI", leader_epoch, 2, crc) + after_crc
    return struct.pack(">qi", base_offset, len(after_length)) + after_length


@dataclass(frozen=True)
class DecodedBatch:
    base_offset: int
    leader_epoch: int
    attributes: int
    max_timestamp: int
    records: list[Record]
    size: int


def decode_batches(data: bytes) -> list[DecodedBatch]:
    """Every complete batch of ``data`` with its records (uncompressed or gzip), checking each
    CRC as a consumer does; a partial batch at the end is ignored, as consumers ignore it."""
    batches = []
    position = 0
    while position + 12 <= len(data):
        base_offset, length = struct.unpack_from(">qi", data, position)
        if position + 12 + length > len(data):
            break
        batch = data[position : position + 12 + length]
        leader_epoch, magic, crc = struct.unpack_from(">ibI", batch, 12)
        assert magic == 2, magic
        assert crc32c.crc32c(batch[21:]) == crc, f"bad CRC in the batch at {base_offset}"
        attributes, _delta, base_ts, max_ts, _pid, _pe, _seq, count = struct.unpack_from(
            ">hiqqqhii", batch, 21
        )
        body = batch[61:]
        if attributes & 0x07 == 1:
            body = gzip.decompress(body)
        records = []
        at = 0
        for _ in range(count):
            length_, at = read_varint(body, at)
            end = at + length_
            at += 1
            ts_delta, at = read_varint(body, at)
            offset_delta, at = read_varint(body, at)
            key_length, at = read_varint(body, at)
            key = None if key_length < 0 else body[at : at + key_length]
            at += max(key_length, 0)
            value_length, at = read_varint(body, at)
            value = None if value_length < 0 else body[at : at + value_length]
            at += max(value_length, 0)
            header_count, at = read_varint(body, at)
            headers = []
            for _ in range(header_count):
                name_length, at = read_varint(body, at)
                name = body[at : at + name_length].decode()
                at += name_length
                header_length, at = read_varint(body, at)
                header_value = None if header_length < 0 else body[at : at + header_length]
                at += max(header_length, 0)
                headers.append((name, header_value))
            assert at == end
            timestamp = max_ts if attributes & 0x08 else base_ts + ts_delta
            records.append(
                Record(key, value, timestamp, tuple(headers), base_offset + offset_delta)
            )
        batches.append(
            DecodedBatch(base_offset, leader_epoch, attributes, max_ts, records, 12 + length)
        )
        position += 12 + length
    return batches
