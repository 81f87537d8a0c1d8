"""The unit of the replicated metadata log: a batch of records sharing one epoch.

The Raft core, the storage layer and the wire all pass batches around as ``LogBatch``: the
header fields the quorum needs (where the batch starts, how many offsets it covers, which epoch
wrote it) plus ``data``, the batch encoded once by ``encode_batch``. Nothing below the record
codec ever decodes ``data`` again: storage frames it with a CRC32C, Fetch ships it as bytes, and
only the apply path (controller, broker, Spark) calls ``decode_batch``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

import msgpack

from quorum.limits import INT32_MAX
from quorum.metadata.records import (
    CONTROL_RECORD_TYPES,
    Record,
    RecordDecodeError,
    is_control_record,
    pack_msgpack,
    record_from_wire,
    record_to_wire,
    record_type_name,
    unpack_msgpack,
)


@dataclass(frozen=True, slots=True)
class LogBatch:
    base_offset: int
    epoch: int
    record_count: int
    data: bytes

    def __post_init__(self) -> None:
        assert self.base_offset >= 0, self
        assert self.epoch >= 0, self
        assert self.record_count >= 1, self

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.record_count - 1

    @property
    def end_offset(self) -> int:
        """The offset just past this batch (the log end offset once it is appended)."""
        return self.base_offset + self.record_count

    def __repr__(self) -> str:
        return (
            f"LogBatch(base_offset={self.base_offset}, epoch={self.epoch}, "
            f"record_count={self.record_count}, data=<{len(self.data)} bytes>)"
        )


# ----- the batch body codec ---------------------------------------------------------------
#
# A batch body is the msgpack map {"base_offset", "epoch", "timestamp_ms", "control", "records"}
# (docs/architecture.md#records-and-batches), where "records" holds the record arrays of
# ``record_to_wire``. The map repeats base_offset and epoch so a body read on its own (Spark, ``log
# dump``) is complete, and so ``decode_log_batch`` can check it against the header it travelled
# with.

BATCH_KEYS: Final = frozenset({"base_offset", "epoch", "timestamp_ms", "control", "records"})
_INT64_MAX: Final = (1 << 63) - 1


def _check_header_int(name: str, value: object, maximum: int) -> None:
    if type(value) is not int or not 0 <= value <= maximum:
        raise ValueError(f"{name} must be an int in [0, {maximum}], got {value!r}")


def encode_batch(
    *,
    base_offset: int,
    epoch: int,
    timestamp_ms: int,
    records: Sequence[Record],
    control: bool = False,
) -> LogBatch:
    """Encode ``records`` as one batch whose first record gets ``base_offset``.

    A batch holds at least one record. A control batch (``control=True``) holds only control
    records and any other batch none, as in Kafka, so a reader can tell Raft bookkeeping from
    metadata changes without decoding every record.
    """
    _check_header_int("base_offset", base_offset, _INT64_MAX)
    _check_header_int("epoch", epoch, INT32_MAX)
    _check_header_int("timestamp_ms", timestamp_ms, _INT64_MAX)
    if type(control) is not bool:
        raise ValueError(f"control must be a bool, got {control!r}")
    if len(records) == 0:
        raise ValueError("a batch holds at least one record, got none")
    if base_offset + len(records) - 1 > _INT64_MAX:
        raise ValueError(f"{len(records)} records from base_offset {base_offset} overflow int64")
    wire_records = []
    for index, record in enumerate(records):
        wire = record_to_wire(record)
        if is_control_record(record) != control:
            kind = "control" if control else "non-control"
            raise ValueError(
                f"a {kind} batch cannot hold {record_type_name(record)} "
                f"(record {index} of {len(records)}, would be offset {base_offset + index})"
            )
        wire_records.append(wire)
    body = {
        "base_offset": base_offset,
        "epoch": epoch,
        "timestamp_ms": timestamp_ms,
        "control": control,
        "records": wire_records,
    }
    return LogBatch(
        base_offset=base_offset,
        epoch=epoch,
        record_count=len(wire_records),
        data=pack_msgpack(body),
    )


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    """A batch body decoded into records; ``records[i]`` has offset ``base_offset + i``."""

    base_offset: int
    epoch: int
    timestamp_ms: int
    control: bool
    records: tuple[Record, ...]

    def __post_init__(self) -> None:
        assert self.base_offset >= 0, self
        assert self.epoch >= 0, self
        assert len(self.records) >= 1, self

    @property
    def record_count(self) -> int:
        return len(self.records)

    @property
    def last_offset(self) -> int:
        return self.base_offset + len(self.records) - 1

    @property
    def end_offset(self) -> int:
        """The offset just past this batch."""
        return self.base_offset + len(self.records)


def _malformed(message: str) -> RecordDecodeError:
    return RecordDecodeError(f"malformed batch: {message}")


def decode_batch(data: bytes) -> DecodedBatch:
    """Decode a batch body written by ``encode_batch``.

    Raises ``RecordDecodeError`` (or its subclasses ``UnknownRecordTypeError`` and
    ``UnsupportedRecordVersionError``) for anything that is not a complete, well-formed batch,
    naming the offset of a bad record. Nothing is skipped.
    """
    body = unpack_msgpack(data)
    if type(body) is not dict:
        raise _malformed(f"a batch is a msgpack map, got {body!r:.200}")
    keys = body.keys()
    if keys != BATCH_KEYS:
        missing = sorted(BATCH_KEYS - keys)
        unexpected = sorted(keys - BATCH_KEYS)
        raise _malformed(f"missing keys {missing}, unexpected keys {unexpected}")
    base_offset = body["base_offset"]
    epoch = body["epoch"]
    timestamp_ms = body["timestamp_ms"]
    control = body["control"]
    wire_records = body["records"]
    for name, value, maximum in (
        ("base_offset", base_offset, _INT64_MAX),
        ("epoch", epoch, INT32_MAX),
        ("timestamp_ms", timestamp_ms, _INT64_MAX),
    ):
        if type(value) is not int or not 0 <= value <= maximum:
            raise _malformed(f"{name} must be an int in [0, {maximum}], got {value!r}")
    if type(control) is not bool:
        raise _malformed(f"control must be a bool, got {control!r}")
    if type(wire_records) is not tuple or len(wire_records) == 0:
        raise _malformed(
            f"records must be a non-empty array, got {wire_records!r:.200} "
            f"(batch at base_offset {base_offset})"
        )
    records = []
    for index, wire in enumerate(wire_records):
        offset = base_offset + index
        try:
            record = record_from_wire(wire)
        except RecordDecodeError as exc:
            raise exc.with_context(
                f"record at offset {offset} (record {index} of {len(wire_records)} in the "
                f"batch at base_offset {base_offset}, epoch {epoch})"
            ) from exc
        if (record.TYPE in CONTROL_RECORD_TYPES) != control:
            kind = "control" if control else "non-control"
            raise _malformed(
                f"record at offset {offset}: a {kind} batch holds {record_type_name(record)} "
                f"(batch at base_offset {base_offset}, epoch {epoch})"
            )
        records.append(record)
    return DecodedBatch(
        base_offset=base_offset,
        epoch=epoch,
        timestamp_ms=timestamp_ms,
        control=control,
        records=tuple(records),
    )


def decode_log_batch(batch: LogBatch) -> DecodedBatch:
    """Decode ``batch.data`` and check it agrees with the header it travelled with."""
    decoded = decode_batch(batch.data)
    header = (batch.base_offset, batch.epoch, batch.record_count)
    body = (decoded.base_offset, decoded.epoch, decoded.record_count)
    if header != body:
        raise _malformed(
            f"header (base_offset, epoch, record_count) = {header} disagrees with the body's {body}"
        )
    return decoded


# The batch body's map before "records" (four keys, three int64 values and a bool) fits in this.
_HEADER_PEEK_BYTES: Final = 96


def is_control_batch(data: bytes) -> bool:
    """Whether a batch body (``encode_batch``) is a control batch, read from the map's leading
    keys without decoding its records (the Raft core looks for voter changes this way in every
    batch it appends). Falls back to a full decode for a body not laid out as
    ``encode_batch`` writes it."""
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=True, use_list=False)
    unpacker.feed(data[:_HEADER_PEEK_BYTES])
    try:
        for _ in range(unpacker.read_map_header()):
            key = unpacker.unpack()
            if key == "records":
                break
            value = unpacker.unpack()
            if key == "control" and type(value) is bool:
                return value
    except (msgpack.OutOfData, ValueError, msgpack.UnpackException):
        pass
    return decode_batch(data).control


def iter_records(decoded: DecodedBatch) -> Iterator[tuple[int, Record]]:
    """Yield ``(offset, record)`` for every record of the batch, in log order."""
    return enumerate(decoded.records, start=decoded.base_offset)
