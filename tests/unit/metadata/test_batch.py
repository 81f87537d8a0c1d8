"""The batch body codec: encode_batch / decode_batch / iter_records."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quorum.ids import Uuid
from quorum.metadata.batch import (
    DecodedBatch,
    LogBatch,
    decode_batch,
    decode_log_batch,
    encode_batch,
    iter_records,
)
from quorum.metadata.records import (
    LeaderChangeMessage,
    NoOpRecord,
    PartitionRecord,
    Record,
    RecordDecodeError,
    RemoveTopicRecord,
    SnapshotFooter,
    SnapshotHeader,
    TopicRecord,
    UnknownRecordTypeError,
    UnsupportedRecordVersionError,
    pack_msgpack,
    record_to_wire,
)
from tests.unit.metadata.test_records import control_records, metadata_records

TOPIC_ID = Uuid.parse("MnNdA8q3R0GGY6OHa-YcnQ")


def body(**overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "base_offset": 10,
        "epoch": 2,
        "timestamp_ms": 1_700_000_000_000,
        "control": False,
        "records": [record_to_wire(TopicRecord("orders", TOPIC_ID)), [20, 0, []]],
    }
    fields.update(overrides)
    return fields


def test_encode_batch_header_and_body() -> None:
    records: list[Record] = [
        TopicRecord("orders", TOPIC_ID),
        PartitionRecord(TOPIC_ID, 0, (1, 2), (1, 2), 1),
    ]
    batch = encode_batch(base_offset=10, epoch=2, timestamp_ms=123, records=records)
    assert (batch.base_offset, batch.epoch, batch.record_count) == (10, 2, 2)
    assert (batch.last_offset, batch.end_offset) == (11, 12)
    assert msgpack.unpackb(batch.data, raw=False, strict_map_key=True) == {
        "base_offset": 10,
        "epoch": 2,
        "timestamp_ms": 123,
        "control": False,
        "records": [record_to_wire(record) for record in records],
    }


def test_decode_batch_round_trip_and_offsets() -> None:
    records: list[Record] = [
        TopicRecord("orders", TOPIC_ID),
        PartitionRecord(TOPIC_ID, 0, (1, 2), (1, 2), 1),
        NoOpRecord(),
    ]
    batch = encode_batch(base_offset=100, epoch=7, timestamp_ms=5, records=records)
    decoded = decode_batch(batch.data)
    assert decoded == DecodedBatch(
        base_offset=100, epoch=7, timestamp_ms=5, control=False, records=tuple(records)
    )
    assert (decoded.record_count, decoded.last_offset, decoded.end_offset) == (3, 102, 103)
    assert list(iter_records(decoded)) == [
        (100, records[0]),
        (101, records[1]),
        (102, records[2]),
    ]
    assert decode_log_batch(batch) == decoded


def test_control_batch_round_trip() -> None:
    records: list[Record] = [SnapshotHeader(0, 99), SnapshotFooter(0)]
    batch = encode_batch(base_offset=0, epoch=0, timestamp_ms=0, records=records, control=True)
    decoded = decode_batch(batch.data)
    assert decoded.control is True
    assert decoded.records == tuple(records)


@settings(max_examples=150, deadline=None)
@given(
    base_offset=st.integers(0, 1 << 40),
    epoch=st.integers(0, (1 << 31) - 1),
    timestamp_ms=st.integers(0, (1 << 63) - 1),
    control=st.booleans(),
    data=st.data(),
)
def test_round_trip_property(
    base_offset: int, epoch: int, timestamp_ms: int, control: bool, data: st.DataObject
) -> None:
    strategy = control_records if control else metadata_records
    records = data.draw(st.lists(strategy, min_size=1, max_size=8))
    batch = encode_batch(
        base_offset=base_offset,
        epoch=epoch,
        timestamp_ms=timestamp_ms,
        records=records,
        control=control,
    )
    decoded = decode_log_batch(batch)
    assert decoded.records == tuple(records)
    assert (decoded.base_offset, decoded.epoch, decoded.timestamp_ms, decoded.control) == (
        base_offset,
        epoch,
        timestamp_ms,
        control,
    )
    assert [offset for offset, _ in iter_records(decoded)] == list(
        range(base_offset, batch.end_offset)
    )


# ----- encode refusals --------------------------------------------------------------------


def test_empty_batch_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        encode_batch(base_offset=0, epoch=0, timestamp_ms=0, records=[])


def test_control_record_in_a_data_batch_is_refused() -> None:
    with pytest.raises(ValueError, match="non-control batch cannot hold LeaderChangeMessage"):
        encode_batch(
            base_offset=4,
            epoch=1,
            timestamp_ms=0,
            records=[NoOpRecord(), LeaderChangeMessage(1, 1, (1,))],
        )


def test_data_record_in_a_control_batch_is_refused() -> None:
    with pytest.raises(ValueError, match="a control batch cannot hold NoOpRecord"):
        encode_batch(
            base_offset=4,
            epoch=1,
            timestamp_ms=0,
            records=[LeaderChangeMessage(1, 1, (1,)), NoOpRecord()],
            control=True,
        )


@pytest.mark.parametrize(
    ("header", "fragment"),
    [
        ({"base_offset": -1}, "base_offset"),
        ({"base_offset": True}, "base_offset"),
        ({"epoch": -1}, "epoch"),
        ({"epoch": 1 << 31}, "epoch"),
        ({"timestamp_ms": 1.5}, "timestamp_ms"),
        ({"control": 0}, "control must be a bool"),
        ({"base_offset": (1 << 63) - 1}, "overflow int64"),
    ],
)
def test_bad_header_values_are_refused(header: dict[str, Any], fragment: str) -> None:
    arguments: dict[str, Any] = {"base_offset": 0, "epoch": 0, "timestamp_ms": 0}
    arguments.update(header)
    with pytest.raises(ValueError, match=fragment):
        encode_batch(records=[NoOpRecord(), NoOpRecord()], **arguments)


def test_non_records_are_refused() -> None:
    with pytest.raises(TypeError, match="not a metadata record"):
        encode_batch(base_offset=0, epoch=0, timestamp_ms=0, records=["TopicRecord"])  # type: ignore[list-item]


# ----- decode refusals --------------------------------------------------------------------


def test_well_formed_hand_built_body_decodes() -> None:
    # The control for the refusals below: body() itself is accepted.
    decoded = decode_batch(pack_msgpack(body()))
    assert decoded.records == (TopicRecord("orders", TOPIC_ID), NoOpRecord())
    assert decoded.base_offset == 10


def test_every_truncation_is_a_decode_error() -> None:
    data = pack_msgpack(body())
    for end in range(len(data)):
        with pytest.raises(RecordDecodeError, match="not valid msgpack"):
            decode_batch(data[:end])


def test_trailing_bytes_are_a_decode_error() -> None:
    with pytest.raises(RecordDecodeError, match="ExtraData"):
        decode_batch(pack_msgpack(body()) + b"\xc0")


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ([1, 2], "a batch is a msgpack map"),
        (None, "a batch is a msgpack map"),
        ({"base_offset": 0}, "missing keys ['control', 'epoch', 'records', 'timestamp_ms']"),
        (body(extra=1), "unexpected keys ['extra']"),
        ({k: v for k, v in body().items() if k != "control"}, "missing keys ['control']"),
        (body(base_offset=-1), "base_offset must be an int"),
        (body(base_offset="10"), "base_offset must be an int"),
        (body(epoch=False), "epoch must be an int"),
        (body(epoch=1 << 31), "epoch must be an int"),
        (body(timestamp_ms=None), "timestamp_ms must be an int"),
        (body(control=1), "control must be a bool"),
        (body(records=[]), "records must be a non-empty array"),
        (body(records={"0": [20, 0, []]}), "records must be a non-empty array"),
        (body(records=b"\x93\x14\x00\x90"), "records must be a non-empty array"),
    ],
)
def test_malformed_bodies(value: object, fragment: str) -> None:
    with pytest.raises(RecordDecodeError) as info:
        decode_batch(pack_msgpack(value))
    assert fragment in str(info.value)


def test_bad_record_error_names_its_offset_and_keeps_its_class() -> None:
    records = [[20, 0, []], [20, 0, []], [77, 0, []]]
    with pytest.raises(UnknownRecordTypeError) as info:
        decode_batch(pack_msgpack(body(base_offset=40, records=records)))
    message = str(info.value)
    assert message.startswith("record at offset 42 (record 2 of 3 in the batch at base_offset 40")
    assert "unknown metadata record type 77" in message
    assert info.value.type_code == 77

    with pytest.raises(UnsupportedRecordVersionError, match="offset 40"):
        decode_batch(pack_msgpack(body(base_offset=40, records=[[20, 5, []]])))

    with pytest.raises(RecordDecodeError, match=r"offset 41.*RemoveTopicRecord v0 has 1 fields"):
        decode_batch(pack_msgpack(body(base_offset=40, records=[[20, 0, []], [9, 0, []]])))


def test_control_mixing_in_a_body_is_a_decode_error() -> None:
    leader_change = record_to_wire(LeaderChangeMessage(1, 1, (1,)))
    with pytest.raises(RecordDecodeError, match="offset 11: a non-control batch holds Leader"):
        decode_batch(pack_msgpack(body(records=[[20, 0, []], leader_change])))
    with pytest.raises(RecordDecodeError, match="offset 10: a control batch holds NoOpRecord"):
        decode_batch(pack_msgpack(body(control=True, records=[[20, 0, []]])))


@pytest.mark.parametrize(
    "header",
    [
        {"base_offset": 11},
        {"epoch": 3},
        {"record_count": 1},
    ],
)
def test_decode_log_batch_checks_the_header(header: dict[str, int]) -> None:
    good = encode_batch(
        base_offset=10, epoch=2, timestamp_ms=0, records=[NoOpRecord(), RemoveTopicRecord(TOPIC_ID)]
    )
    fields = {"base_offset": 10, "epoch": 2, "record_count": 2} | header
    with pytest.raises(RecordDecodeError, match="disagrees with the body"):
        decode_log_batch(LogBatch(data=good.data, **fields))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_arbitrary_bytes_decode_or_are_refused(data: bytes) -> None:
    try:
        decoded = decode_batch(data)
    except RecordDecodeError:
        return
    assert decoded.records
