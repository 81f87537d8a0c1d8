"""Kafka's record batch (magic v2) as bytes: its header, the checks a leader makes before it
appends one, and the fields a leader assigns. Pure: no I/O, no clock (``now_ms`` comes in).

The layout (Kafka's ``DefaultRecordBatch``; every integer big-endian)::

    offset  size  field
         0     8  baseOffset            assigned by the leader (a producer sends 0)
         8     4  batchLength           bytes after this field: the batch is 12 + batchLength
        12     4  partitionLeaderEpoch  assigned by the leader
        16     1  magic                 2 (0 and 1 are the legacy message formats)
        17     4  crc                   CRC32C of every byte from attributes to the end
        21     2  attributes            compression (bits 0-2), timestamp type (3: LogAppendTime),
                                        transactional (4), control (5), delete horizon (6)
        23     4  lastOffsetDelta       recordCount - 1 in a batch a producer sends
        27     8  baseTimestamp
        35     8  maxTimestamp          set by the leader for LogAppendTime
        43     8  producerId            -1: neither idempotent nor transactional
        51     2  producerEpoch
        53     4  baseSequence
        57     4  recordCount
        61        records

The leader keeps a batch as the producer sent it except for the base offset and the partition
leader epoch, which the CRC does not cover, and, for a topic with LogAppendTime, the maximum
timestamp and the timestamp-type bit, after which the CRC is computed again (in C, by the
``crc32c`` package, as every CRC here).

The checks run per batch, never per record (docs/kafka-listener.md#produce): the framing, the
magic, the CRC over the whole batch, the record count against ``lastOffsetDelta``, the size
against ``max.message.bytes``, and the timestamps of the header (the first and the largest)
against ``message.timestamp.before.max.ms`` / ``after.max.ms``. A record is never decoded, so
a compressed batch is never decompressed: its record count is the header's. What that leaves
unchecked, compared with Kafka's per-record validation, is listed in docs/kafka-listener.md.
``record_timestamps`` decodes one uncompressed (or gzip) batch's records for ListOffsets, off
the append path.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final, NamedTuple

import crc32c

from broker.log.errors import (
    CORRUPT_MESSAGE,
    INVALID_RECORD,
    INVALID_TIMESTAMP,
    INVALID_TXN_STATE,
    MESSAGE_TOO_LARGE,
    RECORD_LIST_TOO_LARGE,
    UNKNOWN_SERVER_ERROR,
    UNSUPPORTED_COMPRESSION_TYPE,
    RecordBatchError,
)

__all__ = [
    "BATCH_HEADER_BYTES",
    "LOG_OVERHEAD_BYTES",
    "BatchHeader",
    "ProducedBatch",
    "batch_crc",
    "batches_below",
    "check_produced",
    "check_replicated",
    "iter_headers",
    "read_header",
    "read_varint",
    "record_timestamps",
    "stamp",
]

# Kafka's Records.LOG_OVERHEAD: the base offset and the batch length precede every batch.
LOG_OVERHEAD_BYTES: Final = 12
# Kafka's DefaultRecordBatch.RECORD_BATCH_OVERHEAD: the header up to the first record.
BATCH_HEADER_BYTES: Final = 61
# Kafka's LegacyRecord.RECORD_OVERHEAD_V0: no batch of any magic is shorter (batchLength).
LEGACY_RECORD_BYTES_MIN: Final = 14
# The smallest batchLength of a magic-2 batch: its header after the log overhead.
BATCH_LENGTH_MIN: Final = BATCH_HEADER_BYTES - LOG_OVERHEAD_BYTES
# The bytes up to and including the magic (Kafka's HEADER_SIZE_UP_TO_MAGIC).
HEADER_BYTES_UP_TO_MAGIC: Final = 17
# The smallest record of an uncompressed batch: length, attributes, timestamp delta, offset
# delta, key length, value length and header count, one byte each.
RECORD_BYTES_MIN: Final = 7

MAGIC_V2: Final = 2
LENGTH_AT: Final = 8
PARTITION_LEADER_EPOCH_AT: Final = 12
MAGIC_AT: Final = 16
CRC_AT: Final = 17
ATTRIBUTES_AT: Final = 21
LAST_OFFSET_DELTA_AT: Final = 23
MAX_TIMESTAMP_AT: Final = 35

COMPRESSION_MASK: Final = 0x07
TIMESTAMP_TYPE_LOG_APPEND_TIME: Final = 0x08
TRANSACTIONAL_FLAG: Final = 0x10
CONTROL_FLAG: Final = 0x20
# Kafka's CompressionType ids: none, gzip, snappy, lz4, zstd.
COMPRESSION_NAMES: Final = ("none", "gzip", "snappy", "lz4", "zstd")
COMPRESSION_GZIP: Final = 1
COMPRESSION_ZSTD: Final = 4
# Produce requests before v7 may not carry zstd (Kafka's ProduceRequest.validateRecords).
ZSTD_PRODUCE_VERSION_MIN: Final = 7
NO_TIMESTAMP: Final = -1
NO_PRODUCER_ID: Final = -1

_HEADER: Final = struct.Struct(">qiibIhiqqqhii")
_OFFSET_AND_LENGTH: Final = struct.Struct(">qi")
_INT32: Final = struct.Struct(">i")
_INT64: Final = struct.Struct(">q")
_UINT32: Final = struct.Struct(">I")
_INT16: Final = struct.Struct(">h")
assert _HEADER.size == BATCH_HEADER_BYTES


class BatchHeader(NamedTuple):
    """The 61-byte header of a magic-2 batch, as Kafka names its fields."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """The batch's bytes, log overhead included."""
        return LOG_OVERHEAD_BYTES + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_LOG_APPEND_TIME)


def read_header(buffer: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """The header at ``position`` (at least ``BATCH_HEADER_BYTES`` must remain)."""
    return BatchHeader._make(_HEADER.unpack_from(buffer, position))


def batch_crc(buffer: bytes | bytearray | memoryview, position: int, size: int) -> int:
    """The CRC32C a batch of ``size`` bytes at ``position`` should carry."""
    return crc32c.crc32c(memoryview(buffer)[position + ATTRIBUTES_AT : position + size])


def iter_headers(
    buffer: bytes | bytearray | memoryview, start: int = 0, end: int | None = None
) -> Iterator[tuple[int, int, int]]:
    """(position, base offset, size) of each complete batch in ``buffer[start:end]`` by its
    framing alone (offset and length), stopping at the first incomplete one or one whose
    length is below a v2 header's. No CRC: for slicing what was validated before."""
    stop = len(buffer) if end is None else end
    position = start
    while position + LOG_OVERHEAD_BYTES <= stop:
        base_offset, length = _OFFSET_AND_LENGTH.unpack_from(buffer, position)
        size = LOG_OVERHEAD_BYTES + length
        if length < BATCH_LENGTH_MIN or position + size > stop:
            return
        yield position, base_offset, size
        position += size


def batches_below(buffer: bytes | bytearray | memoryview, limit: int) -> int:
    """The bytes of the whole batches at the start of ``buffer`` whose last offset is below
    ``limit`` (a read bounded by the high watermark)."""
    end = 0
    for position, base_offset, size in iter_headers(buffer):
        (delta,) = _INT32.unpack_from(buffer, position + LAST_OFFSET_DELTA_AT)
        if base_offset + delta >= limit:
            break
        end = position + size
    return end


@dataclass(frozen=True, slots=True)
class TimestampRules:
    """A topic's ``message.timestamp.*`` configs (Kafka's defaults: CreateTime, no bounds)."""

    log_append_time: bool = False
    before_max_ms: int = 2**63 - 1
    after_max_ms: int = 2**63 - 1


@dataclass(frozen=True, slots=True)
class ProducedBatch:
    """A produced batch that passed every check: its bytes (exactly one batch, trailing bytes
    dropped, as Kafka trims them) and what its header says."""

    data: bytes
    header: BatchHeader


def check_produced(
    records: bytes | None,
    *,
    produce_version: int,
    max_message_bytes: int,
    timestamps: TimestampRules,
    now_ms: int,
) -> ProducedBatch:
    """The one batch of a Produce request's partition, or ``RecordBatchError`` with Kafka's
    code and a message naming what was wrong and what is allowed, in Kafka's order of checks
    (``ProduceRequest.validateRecords``, then ``UnifiedLog.analyzeAndValidateRecords`` and
    ``LogValidator.validateBatch``):

    - no complete batch, a magic other than 2, a second batch: INVALID_RECORD;
    - a batchLength below 14 or a magic outside 0..2: CORRUPT_MESSAGE (Kafka's
      ``ByteBufferLogInputStream``);
    - zstd before Produce v7: UNSUPPORTED_COMPRESSION_TYPE;
    - a base offset other than 0: INVALID_RECORD;
    - larger than ``max.message.bytes``: MESSAGE_TOO_LARGE;
    - a CRC that does not match, or an uncompressed batch claiming more records than its
      bytes can hold: CORRUPT_MESSAGE;
    - ``lastOffsetDelta`` or ``recordCount`` below 1, or disagreeing, a control batch, a
      producer id with a negative sequence: INVALID_RECORD;
    - a transactional batch: INVALID_TXN_STATE (transactions are not served,
      docs/kafka-listener.md#produce); an idempotent one's sequences and epoch are the
      partition log's to check (``producer_state.py``);
    - the LogAppendTime bit set by the producer, or (CreateTime) a first or largest timestamp
      outside [now - before.max.ms, now + after.max.ms]: INVALID_TIMESTAMP.
    """
    data = records or b""
    available = len(data)
    if available >= LOG_OVERHEAD_BYTES:
        (length,) = _INT32.unpack_from(data, LENGTH_AT)
        if length < LEGACY_RECORD_BYTES_MIN:
            raise RecordBatchError(
                CORRUPT_MESSAGE,
                f"the batch length is {length}; allowed: at least {LEGACY_RECORD_BYTES_MIN} "
                f"(a magic-2 batch has at least {BATCH_LENGTH_MIN})",
            )
        if available >= HEADER_BYTES_UP_TO_MAGIC:
            magic = data[MAGIC_AT]
            if magic > MAGIC_V2:
                raise RecordBatchError(
                    CORRUPT_MESSAGE, f"invalid magic {magic} in the record batch; allowed: 2"
                )
    if available < LOG_OVERHEAD_BYTES or available < LOG_OVERHEAD_BYTES + length:
        claimed = "" if available < LOG_OVERHEAD_BYTES else f" (it claims {12 + length} bytes)"
        raise RecordBatchError(
            INVALID_RECORD,
            f"Produce v{produce_version} must carry exactly one complete record batch per "
            f"partition; {available} bytes were sent{claimed}",
        )
    magic = data[MAGIC_AT]
    if magic != MAGIC_V2:
        raise RecordBatchError(
            INVALID_RECORD,
            f"Produce v{produce_version} may carry record batches of magic 2 only, not magic "
            f"{magic} (message format v{magic}: upgrade the client)",
        )
    if length < BATCH_LENGTH_MIN:
        raise RecordBatchError(
            CORRUPT_MESSAGE,
            f"the batch length is {length}; a magic-2 batch has at least {BATCH_LENGTH_MIN}",
        )
    size = LOG_OVERHEAD_BYTES + length
    header = read_header(data)
    rest = available - size
    if rest >= LOG_OVERHEAD_BYTES:
        (next_length,) = _INT32.unpack_from(data, size + LENGTH_AT)
        if next_length >= LEGACY_RECORD_BYTES_MIN and rest >= LOG_OVERHEAD_BYTES + next_length:
            raise RecordBatchError(
                INVALID_RECORD,
                f"Produce v{produce_version} may carry exactly one record batch per partition; "
                "this one carries more",
            )
    compression = header.compression
    if compression >= len(COMPRESSION_NAMES):
        raise RecordBatchError(
            CORRUPT_MESSAGE,
            f"unknown compression type {compression}; allowed: 0-4 "
            f"({', '.join(COMPRESSION_NAMES)})",
        )
    if compression == COMPRESSION_ZSTD and produce_version < ZSTD_PRODUCE_VERSION_MIN:
        raise RecordBatchError(
            UNSUPPORTED_COMPRESSION_TYPE,
            f"Produce v{produce_version} may not carry zstd batches (v7 and later may)",
        )
    if header.base_offset != 0:
        raise RecordBatchError(
            INVALID_RECORD,
            f"the batch's base offset is {header.base_offset}; a producer's batch has 0 "
            "(the leader assigns offsets)",
        )
    if size > max_message_bytes:
        raise RecordBatchError(
            MESSAGE_TOO_LARGE,
            f"the record batch is {size} bytes; allowed: at most {max_message_bytes} "
            "(the topic's max.message.bytes)",
        )
    crc = batch_crc(data, 0, size)
    if crc != header.crc:
        raise RecordBatchError(
            CORRUPT_MESSAGE,
            f"the record batch's CRC32C is {header.crc:#010x} but its bytes give {crc:#010x}",
        )
    _check_counts(header, size)
    _check_producer(header)
    _check_timestamps(header, timestamps, now_ms)
    return ProducedBatch(data if rest == 0 else data[:size], header)


def check_replicated(
    data: bytes | bytearray | memoryview, next_offset: int | None, size_max: int
) -> list[BatchHeader]:
    """The whole batches at the start of ``data`` (a follower's fetched records: batches as
    the leader wrote them, offsets and partition leader epochs assigned), each checked as
    recovery checks a stored batch, Kafka's ``analyzeAndValidateRecords`` for a follower; a
    partial batch at the end (a fetch cut at its byte limit) is left out. Raises
    ``RecordBatchError``:

    - a batch length below a magic-2 header's, a magic other than 2, a negative last offset
      delta, a CRC32C that does not match: CORRUPT_MESSAGE;
    - larger than ``size_max`` (the topic's segment.bytes): RECORD_LIST_TOO_LARGE;
    - a base offset below ``next_offset`` (the first batch: the follower's log end offset,
      unchecked when None; later ones: the previous batch's next offset; a gap is allowed,
      as Kafka's followers allow it: a compacted leader's log has gaps, ``cleaner.py``):
      UNKNOWN_SERVER_ERROR, as Kafka's ``UnexpectedAppendOffsetException`` and
      ``OffsetsOutOfOrderException`` are answered (a follower fetching from its log end offset
      never gets one: a bug, not a peer's fault).
    """
    headers: list[BatchHeader] = []
    available = len(data)
    position = 0
    while position + LOG_OVERHEAD_BYTES <= available:
        base_offset, length = _OFFSET_AND_LENGTH.unpack_from(data, position)
        if length < BATCH_LENGTH_MIN:
            raise RecordBatchError(
                CORRUPT_MESSAGE,
                f"the batch at byte {position} (offset {base_offset}) has length {length}; a "
                f"magic-2 batch has at least {BATCH_LENGTH_MIN}",
            )
        size = LOG_OVERHEAD_BYTES + length
        if position + size > available:
            break  # a partial batch at the end: the next fetch gets it whole
        header = read_header(data, position)
        where = f"the batch at offset {base_offset} (byte {position})"
        if header.magic != MAGIC_V2:
            raise RecordBatchError(
                CORRUPT_MESSAGE, f"{where} has magic {header.magic}; a replica stores magic 2"
            )
        if header.last_offset_delta < 0:
            raise RecordBatchError(
                CORRUPT_MESSAGE,
                f"{where} has last offset delta {header.last_offset_delta}; allowed: 0 or more",
            )
        if size > size_max:
            raise RecordBatchError(
                RECORD_LIST_TOO_LARGE,
                f"{where} is {size} bytes; allowed: at most the topic's segment.bytes ({size_max})",
            )
        crc = batch_crc(data, position, size)
        if crc != header.crc:
            raise RecordBatchError(
                CORRUPT_MESSAGE,
                f"{where} has CRC32C {header.crc:#010x} but its bytes give {crc:#010x}",
            )
        if next_offset is not None and base_offset < next_offset:
            raise RecordBatchError(
                UNKNOWN_SERVER_ERROR,
                f"{where} starts below the replica's next offset {next_offset} "
                + (
                    "(the log end offset): a follower appends only at or past its log end"
                    if not headers
                    else "(the previous batch's end): the batches overlap"
                ),
            )
        headers.append(header)
        next_offset = header.next_offset
        position += size
    return headers


def _check_counts(header: BatchHeader, size: int) -> None:
    count, delta = header.record_count, header.last_offset_delta
    if delta < 0 or count <= 0 or count != delta + 1:
        raise RecordBatchError(
            INVALID_RECORD,
            f"the batch claims {count} records and a last offset delta of {delta}; a batch "
            "holds at least one record and its last offset delta is its record count - 1",
        )
    if header.compression == 0 and count > (size - BATCH_HEADER_BYTES) // RECORD_BYTES_MIN:
        raise RecordBatchError(
            CORRUPT_MESSAGE,
            f"the uncompressed batch claims {count} records in {size - BATCH_HEADER_BYTES} "
            f"bytes; a record takes at least {RECORD_BYTES_MIN}",
        )
    if header.attributes & CONTROL_FLAG:
        raise RecordBatchError(INVALID_RECORD, "clients may not write control batches")


def _check_producer(header: BatchHeader) -> None:
    """Transactions are not served; a producer id needs a sequence. The producer's own state
    (sequences, epochs) is checked by the partition log (``producer_state.py``)."""
    if header.attributes & TRANSACTIONAL_FLAG:
        raise RecordBatchError(
            INVALID_TXN_STATE,
            "transactional batches are not supported by this broker (it serves no "
            "AddPartitionsToTxn or EndTxn): produce without a transactional.id",
        )
    if header.producer_id >= 0 and header.base_sequence < 0:
        raise RecordBatchError(
            INVALID_RECORD,
            f"invalid sequence number {header.base_sequence} in a batch of producer id "
            f"{header.producer_id}",
        )


def _check_timestamps(header: BatchHeader, rules: TimestampRules, now_ms: int) -> None:
    if header.log_append_time:
        raise RecordBatchError(
            INVALID_TIMESTAMP,
            "the batch's timestamp type is LogAppendTime; a producer must send CreateTime "
            "(the broker sets LogAppendTime when the topic asks for it)",
        )
    if rules.log_append_time:
        return
    low = now_ms - rules.before_max_ms
    high = now_ms + rules.after_max_ms
    for name, value in (("first", header.base_timestamp), ("largest", header.max_timestamp)):
        if value != NO_TIMESTAMP and not low <= value <= high:
            raise RecordBatchError(
                INVALID_TIMESTAMP,
                f"the batch's {name} timestamp {value} is out of range; allowed: [{low}, {high}] "
                "(message.timestamp.before.max.ms and after.max.ms around the broker's clock)",
            )


def stamp(
    data: bytes, base_offset: int, leader_epoch: int, log_append_time_ms: int | None
) -> bytearray:
    """``data`` (one checked batch) with the leader's base offset and partition leader epoch,
    and for LogAppendTime (``log_append_time_ms``) the broker's time as its maximum timestamp
    and the timestamp-type bit, its CRC computed again."""
    batch = bytearray(data)
    _OFFSET_AND_LENGTH.pack_into(batch, 0, base_offset, len(batch) - LOG_OVERHEAD_BYTES)
    _INT32.pack_into(batch, PARTITION_LEADER_EPOCH_AT, leader_epoch)
    if log_append_time_ms is not None:
        (attributes,) = _INT16.unpack_from(batch, ATTRIBUTES_AT)
        _INT16.pack_into(batch, ATTRIBUTES_AT, attributes | TIMESTAMP_TYPE_LOG_APPEND_TIME)
        _INT64.pack_into(batch, MAX_TIMESTAMP_AT, log_append_time_ms)
        _UINT32.pack_into(batch, CRC_AT, batch_crc(batch, 0, len(batch)))
    return batch


# ----- one batch's records, for ListOffsets by timestamp (off the append path) --------------


def read_varint(buffer: bytes, position: int) -> tuple[int, int]:
    """A zig-zag varint (Kafka's ByteUtils.readVarlong) and the position after it."""
    shift = 0
    raw = 0
    while True:
        if position >= len(buffer) or shift > 63:
            raise ValueError("a varint runs past the batch")
        byte = buffer[position]
        position += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), position
        shift += 7


def record_timestamps(batch: bytes) -> list[tuple[int, int]] | None:
    """(offset, timestamp) of each record of one stored batch, or None when its records cannot
    be read here (snappy, lz4 or zstd: no decompressor is installed) or are damaged. For
    LogAppendTime every record has the batch's maximum timestamp."""
    header = read_header(batch)
    if header.log_append_time:
        return [(header.base_offset + i, header.max_timestamp) for i in range(header.record_count)]
    body = bytes(batch[BATCH_HEADER_BYTES : header.size])
    if header.compression == COMPRESSION_GZIP:
        try:
            body = zlib.decompress(body, zlib.MAX_WBITS | 16)
        except zlib.error:
            return None
    elif header.compression != 0:
        return None
    found = []
    position = 0
    try:
        for _ in range(header.record_count):
            length, position = read_varint(body, position)
            end = position + length
            position += 1  # attributes
            timestamp_delta, position = read_varint(body, position)
            offset_delta, position = read_varint(body, position)
            found.append(
                (header.base_offset + offset_delta, header.base_timestamp + timestamp_delta)
            )
            position = end
    except ValueError:
        return None
    return found
