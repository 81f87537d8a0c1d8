"""The records inside a magic-2 batch (Kafka's ``DefaultRecord``), for the log cleaner and the
produce check of compacted topics: decoded from an uncompressed or gzip batch, and a batch
built again from the records it keeps. Pure: no I/O.

A record (every integer a zig-zag varint but the attributes)::

    length, attributes (int8), timestampDelta, offsetDelta, keyLength (-1: null), key,
    valueLength (-1: null: a tombstone), value, headerCount, headers

A batch the cleaner rewrites keeps its base offset and its last offset delta (Kafka's
``MemoryRecords.filterTo`` overrides the builder's last offset with the original batch's), so
its offset range, its producer's sequences and the offsets of the records it keeps are those
the producer was answered; only the record count, the largest timestamp, the CRC and, for a
batch holding a tombstone, the delete horizon (KIP-534: attribute bit 6, the base timestamp
field then holds it) change. Batches compressed with snappy, lz4 or zstd cannot be read here
(no decompressor is installed): ``decode_records`` answers None and the cleaner keeps them as
they are.
"""

from __future__ import annotations

import gzip
import io
import struct
import zlib
from typing import Final, NamedTuple

import crc32c

from broker.log.batch import (
    ATTRIBUTES_AT,
    BATCH_HEADER_BYTES,
    COMPRESSION_GZIP,
    COMPRESSION_MASK,
    LOG_OVERHEAD_BYTES,
    MAGIC_V2,
    TIMESTAMP_TYPE_LOG_APPEND_TIME,
    BatchHeader,
    iter_headers,
    read_header,
    read_varint,
)

__all__ = [
    "DELETE_HORIZON_FLAG",
    "Record",
    "decode_records",
    "delete_horizon_ms",
    "encode_batch",
    "encode_empty_batch",
    "has_null_key",
    "holds_record_from",
]

# Kafka's DefaultRecordBatch.DELETE_HORIZON_FLAG_MASK (KIP-534).
DELETE_HORIZON_FLAG: Final = 0x40
_HEADER: Final = struct.Struct(">qiibIhiqqqhii")
# A decoded batch holds at most this many records: Kafka's producers send at most a batch of
# max.message.bytes, and a record takes at least 7 bytes; this bounds a corrupt count.
_RECORDS_PER_BATCH_MAX: Final = 1_048_588 // 7 + 1
# gzip bodies are decompressed in bounded reads up to this size (a batch Kafka accepts is at
# most max.message.bytes compressed; this bounds a decompression bomb).
_DECOMPRESSED_BYTES_MAX: Final = 64 * 1024 * 1024


class Record(NamedTuple):
    """One record: its offset delta in its batch, its absolute timestamp, key and value (None:
    null), its attributes byte and its headers' bytes (the count and the headers, kept as
    they were)."""

    offset_delta: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    attributes: int
    headers: bytes


def _put_varint(out: bytearray, value: int) -> None:
    raw = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)


def _skip_headers(body: bytes, position: int, end: int) -> int:
    count, position = read_varint(body, position)
    if count < 0 or count > end - position:
        raise ValueError("a header count past the record")
    for _ in range(count):
        key_length, position = read_varint(body, position)
        if key_length < 0:
            raise ValueError("a null header key")
        position += key_length
        value_length, position = read_varint(body, position)
        if value_length > 0:
            position += value_length
    return position


def _body(batch: bytes | memoryview, header: BatchHeader) -> bytes | None:
    body = bytes(batch[BATCH_HEADER_BYTES : header.size])
    compression = header.compression
    if compression == 0:
        return body
    if compression != COMPRESSION_GZIP:
        return None
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(body)) as stream:
            data = stream.read(_DECOMPRESSED_BYTES_MAX + 1)
    except (OSError, EOFError, zlib.error):
        return None
    return None if len(data) > _DECOMPRESSED_BYTES_MAX else data


def decode_records(batch: bytes | memoryview, header: BatchHeader) -> list[Record] | None:
    """The records of one stored batch (``batch`` starts at its base offset field), or None
    when they cannot be read here (snappy, lz4, zstd, a control batch) or are damaged."""
    if header.record_count < 0 or header.record_count > _RECORDS_PER_BATCH_MAX:
        return None
    body = _body(batch, header)
    if body is None:
        return None
    records = []
    position = 0
    try:
        for _ in range(header.record_count):
            length, position = read_varint(body, position)
            end = position + length
            if length < 0 or end > len(body):
                raise ValueError("a record runs past the batch")
            attributes = body[position]
            position += 1
            timestamp_delta, position = read_varint(body, position)
            offset_delta, position = read_varint(body, position)
            key_length, position = read_varint(body, position)
            key = None if key_length < 0 else body[position : position + key_length]
            position += max(key_length, 0)
            value_length, position = read_varint(body, position)
            value = None if value_length < 0 else body[position : position + value_length]
            position += max(value_length, 0)
            headers_at = position
            position = _skip_headers(body, position, end)
            if position != end:
                raise ValueError("a record's fields do not add up to its length")
            records.append(
                Record(
                    offset_delta,
                    header.base_timestamp + timestamp_delta,
                    key,
                    value,
                    attributes,
                    body[headers_at:end],
                )
            )
    except ValueError:
        return None
    return records


def holds_record_from(data: bytes | memoryview, offset: int) -> bool:
    """Whether ``data`` (whole stored batches) holds a record at or past ``offset``: what a
    consumer needs of a fetch answer (librdkafka reports an answer without one as a record too
    large to fetch, MSG_SIZE_TOO_LARGE). A cleaned log may answer without one: a batch emptied
    of its records is kept (a producer's last sequence, a cleaned segment's end), and a batch
    that lost its last records keeps its last offset. A batch holding records that starts at
    or past ``offset`` holds one; an earlier one is read record by record, only when no later
    one does (one whose records cannot be read here, snappy, lz4 or zstd, counts as holding
    one)."""
    earlier = []
    for position, base_offset, size in iter_headers(data):
        header = read_header(data, position)
        if header.record_count <= 0:
            continue
        if base_offset >= offset:
            return True
        earlier.append((position, size, header))
    for position, size, header in earlier:  # read only when no later batch answers
        records = decode_records(memoryview(data)[position : position + size], header)
        if records is None or any(header.base_offset + r.offset_delta >= offset for r in records):
            return True
    return False


def has_null_key(batch: bytes | memoryview, header: BatchHeader) -> bool | None:
    """Whether a record of the batch has a null key (None: its records cannot be read here)."""
    records = decode_records(batch, header)
    if records is None:
        return None
    return any(record.key is None for record in records)


def delete_horizon_ms(header: BatchHeader) -> int | None:
    """The batch's delete horizon (KIP-534), or None when it has none."""
    return header.base_timestamp if header.attributes & DELETE_HORIZON_FLAG else None


def _encode_record(out: bytearray, record: Record, base_timestamp: int) -> None:
    body = bytearray()
    body.append(record.attributes)
    _put_varint(body, record.timestamp - base_timestamp)
    _put_varint(body, record.offset_delta)
    for field in (record.key, record.value):
        if field is None:
            _put_varint(body, -1)
        else:
            _put_varint(body, len(field))
            body += field
    body += record.headers
    _put_varint(out, len(body))
    out += body


def _finish(
    header: BatchHeader, *, attributes: int, base_ts: int, max_ts: int, count: int, body: bytes
) -> bytes:
    out = bytearray(BATCH_HEADER_BYTES)
    out += body
    _HEADER.pack_into(
        out,
        0,
        header.base_offset,
        len(out) - LOG_OVERHEAD_BYTES,
        header.partition_leader_epoch,
        MAGIC_V2,
        0,
        attributes,
        header.last_offset_delta,
        base_ts,
        max_ts,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        count,
    )
    struct.pack_into(">I", out, 17, crc32c.crc32c(memoryview(out)[ATTRIBUTES_AT:]))
    return bytes(out)


def encode_batch(header: BatchHeader, records: list[Record], horizon_ms: int | None) -> bytes:
    """The batch ``header`` described, holding only ``records`` (a non-empty subset of its
    own, in order): same base offset, last offset delta, partition leader epoch, producer
    fields and compression; the delete horizon set when ``horizon_ms`` is given (the base
    timestamp then holds it, and each record's timestamp delta is taken from it)."""
    assert records, "an emptied batch is dropped or kept by encode_empty_batch"
    attributes = header.attributes & ~DELETE_HORIZON_FLAG
    if horizon_ms is not None:
        attributes |= DELETE_HORIZON_FLAG
        base_ts = horizon_ms
    else:
        base_ts = records[0].timestamp
    body = bytearray()
    for record in records:
        _encode_record(body, record, base_ts)
    if header.compression == COMPRESSION_GZIP:
        body = bytearray(gzip.compress(bytes(body), mtime=0))
    else:
        assert header.compression == 0, "only batches decode_records read are rewritten"
    if attributes & TIMESTAMP_TYPE_LOG_APPEND_TIME:
        max_ts = header.max_timestamp
    else:
        max_ts = max(record.timestamp for record in records)
    return _finish(
        header,
        attributes=attributes,
        base_ts=base_ts,
        max_ts=max_ts,
        count=len(records),
        body=bytes(body),
    )


def encode_empty_batch(header: BatchHeader) -> bytes:
    """``header``'s batch without records (Kafka's ``DefaultRecordBatch.writeEmptyHeader``):
    its offset range and producer fields kept, so the producer's last sequence survives a
    clean; no compression, both timestamps the batch's largest."""
    attributes = header.attributes & ~(COMPRESSION_MASK | DELETE_HORIZON_FLAG)
    return _finish(
        header,
        attributes=attributes,
        base_ts=header.max_timestamp,
        max_ts=header.max_timestamp,
        count=0,
        body=b"",
    )
