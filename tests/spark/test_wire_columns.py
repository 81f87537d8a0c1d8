"""The fields read straight from the msgpack bytes (``quorum.analytics.wire_columns``): what it
accepts it reads exactly as the typed path does, and what it refuses (``NotFast``) is left to
the typed path, which the tests of test_analytics_source.py check against the reference decoder.
No Spark here: the functions are called directly.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pytest

from quorum.analytics import arrow_batches, log_files, typed_decode, wire_columns
from quorum.analytics.typed_decode import LAYOUT_LIST, NotFast
from quorum.ids import Uuid
from quorum.metadata.records import (
    BrokerEndpoint,
    ClientQuotaEntityData,
    ClientQuotaRecord,
    ConfigRecord,
    LeaderChangeMessage,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    Record,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    is_control_record,
    pack_msgpack,
    record_to_wire,
)
from tests.spark.test_analytics_source import BAD_VALUES, SAMPLES


def _frame(records_wire: list[Any], *, control: bool = False, base_offset: int = 0) -> Any:
    body = {
        "base_offset": base_offset,
        "epoch": 1,
        "timestamp_ms": 5,
        "control": control,
        "records": records_wire,
    }
    return log_files.Frame(0, base_offset, 1, len(records_wire), pack_msgpack(body))


def _raw_frame(records: Sequence[bytes], *, control: bool = False) -> Any:
    """A frame whose records are given as msgpack bytes (encodings the encoder never picks)."""
    head = pack_msgpack({"base_offset": 0, "epoch": 1, "timestamp_ms": 5, "control": control})
    assert head[0] == 0x84  # fixmap of 4: add the fifth key, then the records array
    body = bytes([0x85]) + head[1:] + pack_msgpack("records")
    body += bytes([0x90 | len(records)]) + b"".join(records)
    return log_files.Frame(0, 0, 1, len(records), body)


def _typed(frames: Sequence[Any]) -> list[pa.RecordBatch]:
    chunk = typed_decode.Chunk()
    for frame in frames:
        typed_decode.collect_fast(chunk, frame, 0, None, path="x")
    return arrow_batches.chunk_to_batches(chunk, None)


def _wire(frames: Sequence[Any]) -> list[pa.RecordBatch]:
    chunk = wire_columns.RawChunk()
    for frame in frames:
        wire_columns.collect_raw(chunk, frame, 0, None)
    return arrow_batches.raw_chunk_to_batches(chunk, None)


def _same(wire: list[pa.RecordBatch], typed: list[pa.RecordBatch]) -> bool:
    return len(wire) == len(typed) == 1 and wire[0].equals(typed[0])


def test_every_record_type_is_read_as_the_typed_path_reads_it() -> None:
    """Each sample record, canonically encoded, goes through the wire path (no fallback) and
    gives the typed path's batch; the record types it reads field by field are all there."""
    for record in SAMPLES:
        frame = _frame([record_to_wire(record)], control=is_control_record(record))
        assert _same(_wire([frame]), _typed([frame])), record
    sampled = {type(record).__name__ for record in SAMPLES}
    readable = {layout.type_name for layout in LAYOUT_LIST if wire_columns.reads_layout(layout)}
    assert {"PartitionRecord", "PartitionChangeRecord", "ConfigRecord", "TopicRecord"} <= readable
    assert len(readable & sampled) >= 10, readable & sampled


def test_what_the_wire_path_accepts_it_reads_as_the_typed_path() -> None:
    """Every field of every sample set to each of many wire values: the wire path either
    refuses (NotFast) or gives exactly the typed path's batch; where the typed path refuses,
    the wire path refuses too."""
    accepted = refused = 0
    for record in SAMPLES:
        wire = record_to_wire(record)
        for index in range(len(wire[2])):
            for bad in BAD_VALUES:
                fields = list(wire[2])
                fields[index] = bad
                frame = _frame([[wire[0], wire[1], fields]], control=is_control_record(record))
                try:
                    typed = _typed([frame])
                except NotFast:
                    typed = None
                try:
                    got = _wire([frame])
                except NotFast:
                    refused += 1
                    continue
                assert typed is not None, (record, index, bad)
                assert _same(got, typed), (record, index, bad)
                accepted += 1
    assert accepted > 100 and refused > 100, (accepted, refused)


def _int(code: int, value: int) -> bytes:
    """``value`` with the msgpack int marker ``code`` (not the shortest form)."""
    formats = {0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q", 0xD0: ">b", 0xD1: ">h"}
    formats |= {0xD2: ">i", 0xD3: ">q"}
    return bytes([code]) + struct.pack(formats[code], value)


def _str(code: int, text: str) -> bytes:
    data = text.encode()
    size = {0xD9: ">B", 0xDA: ">H", 0xDB: ">I"}[code]
    return bytes([code]) + struct.pack(size, len(data)) + data


TOPIC = Uuid.parse("ah0vHnqLTD2eDxEiM0RVZg")
_TOPIC_BIN = bytes([0xC4, 16]) + TOPIC.bytes


@pytest.mark.parametrize(
    "record",
    [
        # PartitionRecord: topic id, partition, replicas, isr, leader, leader epoch, epoch
        b"\x93\x03\x00\x97"
        + _TOPIC_BIN
        + _int(0xCC, 5)
        + b"\x93"
        + _int(0xD0, 1)
        + _int(0xCD, 2)
        + _int(0xCE, 300)
        + b"\x91"
        + _int(0xD3, 1)
        + _int(0xD0, -1)
        + _int(0xCF, 2**20)
        + _int(0xD2, 7),
        # PartitionChangeRecord with nil and wide ints in its optional fields
        b"\x93\x05\x00\x97"
        + _TOPIC_BIN
        + _int(0xD1, 9)
        + b"\xc0"
        + _int(0xD1, -1)
        + b"\xc0\xc0"
        + _int(0xCE, 2**31 - 1),
        # ConfigRecord with str 8/16/32 and a nil value
        b"\x93\x04\x00\x94"
        + _int(0xCC, 2)
        + _str(0xD9, "orders")
        + _str(0xDA, "retention.ms")
        + b"\xc0",
        b"\x93\x04\x00\x94\x04" + _str(0xDB, "1") + _str(0xD9, "é" * 40) + _str(0xDA, ""),
        # TopicRecord with type code 2 as uint8
        b"\x93\xcc\x02\x00\x93\xa6orders" + _TOPIC_BIN + b"\xc3",
    ],
    ids=["partition", "partition-change", "config-str8-str16", "config-str32", "topic-uint8-code"],
)
def test_encodings_the_encoder_never_picks_are_read_the_same(record: bytes) -> None:
    frame = _raw_frame([record])
    assert _same(_wire([frame]), _typed([frame]))


@pytest.mark.parametrize(
    "record",
    [
        b"\x93\x03\x00\x97" + _TOPIC_BIN + _int(0xCF, 2**63) + b"\x90\x90\x00\x00\x00",
        b"\x93\x03\x00\x97" + _TOPIC_BIN + b"\x00\x91\xff\x90\x00\x00\x00",  # replica -1
        b"\x93\x04\x00\x94\x02\xa1\xff\xa1k\xc0",  # not UTF-8
        b"\x93\x02\x00\x93\xa1t\xc5\x00\x10" + TOPIC.bytes + b"\xc2",  # id as bin 16
        b"\x93\x09\x00\x91\xc4\x0f" + TOPIC.bytes[:15],  # a 15-byte id
        b"\x93\x14\x01\x90",  # NoOpRecord v1
        b"\x93\x14\x00\x91\x00",  # NoOpRecord with a field
        b"\x93\x04\x00\xdc\x00\x04\x02\xa1t\xa1k\xc0",  # fields as array 16
    ],
    ids=["uint64", "replica-1", "utf8", "bin16", "short-id", "version", "extra", "array16"],
)
def test_anything_unusual_is_left_to_the_typed_path(record: bytes) -> None:
    """Refused by the wire path; ``decode_chunk`` then gives the typed (or reference) answer."""
    frame = _raw_frame([record])
    with pytest.raises(NotFast):
        _wire([frame])


def test_a_mixed_chunk_of_many_batches_is_read_as_the_typed_path_reads_it() -> None:
    """Batches of every common type, control batches and the types decoded record by record
    (broker registrations with endpoints, quotas), in one chunk."""
    rng = random.Random(11)
    print(f"seed 11, {rng.random()}")
    topics = [Uuid.random(rng) for _ in range(30)]
    frames = [_frame([record_to_wire(LeaderChangeMessage(1, 1, (1, 2, 3)))], control=True)]
    offset = 1
    for number in range(200):
        records: list[Record] = []
        for _ in range(rng.randrange(1, 60)):
            topic = rng.choice(topics)
            kind = rng.random()
            if kind < 0.35:
                replicas = tuple(rng.sample(range(200), rng.randrange(1, 5)))
                isr = replicas[: rng.randrange(1, len(replicas) + 1)]
                leader = rng.choice([-1, replicas[0]])
                epoch = rng.choice([0, 7, 70_000, 2**31 - 1])
                records.append(
                    PartitionRecord(topic, rng.randrange(5000), replicas, isr, leader, epoch)
                )
            elif kind < 0.7:
                records.append(
                    PartitionChangeRecord(
                        topic,
                        rng.randrange(300),
                        isr=rng.choice([None, (), (1,), (200, 3)]),
                        leader=rng.choice([None, -1, 4, 1000]),
                        replicas=rng.choice([None, (5, 6, 7)]),
                        leader_epoch=rng.choice([None, 3, 2**20]),
                    )
                )
            elif kind < 0.85:
                value = rng.choice([None, "", "v", "x" * 40, "ü" * 200, "z" * 70_000])
                records.append(ConfigRecord(2, f"topic-{number}", "retention.ms", value))
            elif kind < 0.9:
                records.append(TopicRecord(f"t{number}", topic, rng.random() < 0.1))
            elif kind < 0.93:
                records.append(RemoveTopicRecord(topic))
            elif kind < 0.96:
                records.append(NoOpRecord())
            elif kind < 0.98:
                endpoint = BrokerEndpoint("PLAINTEXT", "localhost", 9092 + number)
                records.append(RegisterBrokerRecord(number, topic, 2**40, (endpoint,), "r1", False))
            else:
                entity = (ClientQuotaEntityData("user", f"u{number}"),)
                records.append(ClientQuotaRecord(entity, "producer_byte_rate", 5.0, remove=False))
        frames.append(_frame([record_to_wire(r) for r in records], base_offset=offset))
        offset += len(records)
    assert _same(_wire(frames), _typed(frames))


def test_offset_ranges_cut_batches_as_the_typed_path_does() -> None:
    records = [record_to_wire(PartitionChangeRecord(TOPIC, n, leader=n)) for n in range(10)]
    frames = [_frame(records[:5]), _frame(records[5:], base_offset=5)]
    for start, end in ((0, None), (3, None), (3, 7), (5, 6), (9, 10), (10, None)):
        typed = typed_decode.Chunk()
        raw = wire_columns.RawChunk()
        for frame in frames:
            typed_decode.collect_fast(typed, frame, start, end, path="x")
            wire_columns.collect_raw(raw, frame, start, end)
        got = arrow_batches.raw_chunk_to_batches(raw, None)
        expected = arrow_batches.chunk_to_batches(typed, None)
        assert len(got) == len(expected), (start, end)
        assert all(a.equals(b) for a, b in zip(got, expected, strict=True)), (start, end)
