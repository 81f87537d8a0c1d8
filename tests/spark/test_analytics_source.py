"""The ``metaquorum`` data source: listing and partitions, the frame walk (torn tails,
corruption), the columnar decoder against the reference decoder, and reading through Spark.

Most tests call the source's functions directly (no Spark: fast); those marked ``spark`` share
the session-wide ``spark`` fixture of conftest.py.
"""

from __future__ import annotations

import dataclasses
import os
import random
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema

from quorum.analytics import arrow_batches, log_files, schema, source, typed_decode
from quorum.analytics.schema import FAMILIES
from quorum.analytics.source import (
    COLUMN_NAMES,
    LogFile,
    LogFilePartition,
    LogReadError,
    ReadOptions,
    arrow_schema,
    list_log_files,
    plan_partitions,
    read_partition,
    spark_schema,
)
from quorum.ids import Uuid
from quorum.metadata.batch import LogBatch, decode_batch, encode_batch
from quorum.metadata.records import (
    BrokerEndpoint,
    ClientQuotaEntityData,
    ClientQuotaRecord,
    ConfigRecord,
    ConfigResourceType,
    FenceBrokerRecord,
    LeaderChangeMessage,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    Record,
    RecordDecodeError,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    SnapshotFooter,
    SnapshotHeader,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    is_control_record,
    pack_msgpack,
    record_to_wire,
)
from quorum.storage import SegmentedLog
from quorum.storage.frames import encode_frame

TOPIC_A = Uuid.parse("ah0vHnqLTD2eDxEiM0RVZg")
TOPIC_B = Uuid.parse("4CMDPTZOQz-3yIL0ICzIKA")
INCARNATION = Uuid.parse("w4a7xM1hTjCY8WrfkbdYSg")
METADATA_DIR = "__cluster_metadata-0"
SMALL_SEGMENT_BYTES = 400


def timestamp_ms(base_offset: int) -> int:
    return 1_700_000_000_000 + 10 * base_offset


def write_log(
    directory: Path, batches: Sequence[tuple[int, Sequence[Record]]], segment_bytes: int = 0
) -> list[LogBatch]:
    """Append ``(epoch, records)`` batches with ``SegmentedLog`` (small segments by default);
    control batches are recognised from their records. Returns the batches written."""
    written = []
    offset = 0
    log = SegmentedLog.open(directory, segment_bytes_max=segment_bytes or SMALL_SEGMENT_BYTES)
    try:
        for epoch, records in batches:
            batch = encode_batch(
                base_offset=offset,
                epoch=epoch,
                timestamp_ms=timestamp_ms(offset),
                records=list(records),
                control=is_control_record(records[0]),
            )
            log.append([batch])
            written.append(batch)
            offset += len(records)
    finally:
        log.close()
    return written


def every_record_type() -> list[tuple[int, list[Record]]]:
    endpoint = BrokerEndpoint("PLAINTEXT", "broker-0.local", 9092)
    return [
        (1, [LeaderChangeMessage(1, 1, (1, 2, 3))]),
        (1, [RegisterBrokerRecord(0, INCARNATION, 7, (endpoint,), "rack-a", True)]),
        (1, [UnfenceBrokerRecord(0, 7), FenceBrokerRecord(0, 7), UnregisterBrokerRecord(0, 7)]),
        (
            1,
            [
                TopicRecord("orders", TOPIC_A, False),
                PartitionRecord(TOPIC_A, 0, (0, 1, 2), (0, 1), 0, 3, 4),
                ConfigRecord(ConfigResourceType.TOPIC, "orders", "retention.ms", "1000"),
            ],
        ),
        (
            2,
            [
                PartitionChangeRecord(TOPIC_A, 0, isr=(0,), leader=-1, partition_epoch=5),
                ConfigRecord(ConfigResourceType.TOPIC, "orders", "retention.ms", None),
                NoOpRecord(),
                RemoveTopicRecord(TOPIC_A),
            ],
        ),
        (2, [ProducerIdsRecord(0, 7, 1000)]),
    ]


def rows_of(partitions: Sequence[Any]) -> list[dict[str, Any]]:
    batches = [batch for partition in partitions for batch in read_partition(partition)]
    if not batches:
        return []
    rows: list[dict[str, Any]] = pa.Table.from_batches(batches).to_pylist()
    return sorted(rows, key=lambda row: (row["snapshot_end_offset"] or -1, row["offset"]))


def read_rows(path: Path, **options: Any) -> list[dict[str, Any]]:
    return rows_of(plan_partitions(ReadOptions(str(path), **options)))


def without_nulls(row: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in row.items() if value is not None}


# ----- schema and the decoder ---------------------------------------------------------------


def test_arrow_schema_is_the_one_spark_expects() -> None:
    assert arrow_schema().equals(to_arrow_schema(spark_schema(), timezone="UTC"))
    assert tuple(arrow_schema().names) == COLUMN_NAMES


def test_each_record_type_fills_its_typed_columns(tmp_path: Path) -> None:
    write_log(tmp_path / METADATA_DIR, every_record_type())
    rows = [without_nulls(row) for row in read_rows(tmp_path)]
    header = {"control": False, "version": 0}
    broker_only = dict.fromkeys(
        ("incarnation_id", "rack", "fenced", "endpoints", "next_producer_id")
    )
    assert rows == [
        {
            **header,
            "offset": 0,
            "epoch": 1,
            "batch_timestamp_ms": timestamp_ms(0),
            "control": True,
            "record_type": "LeaderChangeMessage",
            "leader_change": {"leader_id": 1, "epoch": 1, "voters": [1, 2, 3]},
        },
        {
            **header,
            "offset": 1,
            "epoch": 1,
            "batch_timestamp_ms": timestamp_ms(1),
            "record_type": "RegisterBrokerRecord",
            "broker": {
                "id": 0,
                "epoch": 7,
                "incarnation_id": str(INCARNATION),
                "rack": "rack-a",
                "fenced": True,
                "endpoints": [{"name": "PLAINTEXT", "host": "broker-0.local", "port": 9092}],
                "next_producer_id": None,
            },
        },
        *[
            {
                **header,
                "offset": offset,
                "epoch": 1,
                "batch_timestamp_ms": timestamp_ms(2),
                "record_type": record_type,
                "broker": {"id": 0, "epoch": 7, **broker_only},
            }
            for offset, record_type in (
                (2, "UnfenceBrokerRecord"),
                (3, "FenceBrokerRecord"),
                (4, "UnregisterBrokerRecord"),
            )
        ],
        {
            **header,
            "offset": 5,
            "epoch": 1,
            "batch_timestamp_ms": timestamp_ms(5),
            "record_type": "TopicRecord",
            "topic_id": str(TOPIC_A),
            "topic": {
                "name": "orders",
                "internal": False,
                "creation_offset": None,
                "deletion_offset": None,
            },
        },
        {
            **header,
            "offset": 6,
            "epoch": 1,
            "batch_timestamp_ms": timestamp_ms(5),
            "record_type": "PartitionRecord",
            "topic_id": str(TOPIC_A),
            "partition": {
                "id": 0,
                "replicas": [0, 1, 2],
                "isr": [0, 1],
                "leader": 0,
                "leader_epoch": 3,
                "partition_epoch": 4,
            },
        },
        {
            **header,
            "offset": 7,
            "epoch": 1,
            "batch_timestamp_ms": timestamp_ms(5),
            "record_type": "ConfigRecord",
            "config": {
                "resource_type": 2,
                "resource_name": "orders",
                "name": "retention.ms",
                "value": "1000",
            },
        },
        {
            **header,
            "offset": 8,
            "epoch": 2,
            "batch_timestamp_ms": timestamp_ms(8),
            "record_type": "PartitionChangeRecord",
            "topic_id": str(TOPIC_A),
            "partition": {
                "id": 0,
                "replicas": None,  # unchanged
                "isr": [0],
                "leader": -1,
                "leader_epoch": None,
                "partition_epoch": 5,
            },
        },
        {
            **header,
            "offset": 9,
            "epoch": 2,
            "batch_timestamp_ms": timestamp_ms(8),
            "record_type": "ConfigRecord",
            "config": {
                "resource_type": 2,
                "resource_name": "orders",
                "name": "retention.ms",
                "value": None,  # deleted
            },
        },
        {
            **header,
            "offset": 10,
            "epoch": 2,
            "batch_timestamp_ms": timestamp_ms(8),
            "record_type": "NoOpRecord",
        },
        {
            **header,
            "offset": 11,
            "epoch": 2,
            "batch_timestamp_ms": timestamp_ms(8),
            "record_type": "RemoveTopicRecord",
            "topic_id": str(TOPIC_A),
        },
        {
            **header,
            "offset": 12,
            "epoch": 2,
            "batch_timestamp_ms": timestamp_ms(12),
            "record_type": "ProducerIdsRecord",
            "broker": {
                "id": 0,
                "epoch": 7,
                **dict.fromkeys(("incarnation_id", "rack", "fenced", "endpoints")),
                "next_producer_id": 1000,
            },
        },
    ]


def _frame(records_wire: list[Any], *, control: bool = False, base_offset: int = 0) -> Any:
    body = {
        "base_offset": base_offset,
        "epoch": 1,
        "timestamp_ms": 5,
        "control": control,
        "records": records_wire,
    }
    data = pack_msgpack(body)
    return log_files.Frame(0, base_offset, 1, len(records_wire), data)


def _decode(frame: Any) -> list[dict[str, Any]]:
    partition = LogFilePartition(LogFile("mem.log", 0, 0), (), 0, None)
    batches = arrow_batches.decode_chunk([frame], partition)
    rows: list[dict[str, Any]] = pa.Table.from_batches(batches, arrow_schema()).to_pylist()
    return sorted(rows, key=lambda row: row["offset"])


def _reference_rows(frame: Any) -> list[dict[str, Any]]:
    """Rows built from the reference decoder's records, independently of the fast path."""
    decoded = decode_batch(frame.data)
    rows = []
    for offset, record in enumerate(decoded.records, start=decoded.base_offset):
        row: dict[str, Any] = dict.fromkeys(COLUMN_NAMES)
        family = schema.family_of(schema.RECORD_COLUMNS[type(record)])
        if family is not None:
            row[family] = dict.fromkeys(name for name, _ in dict(FAMILIES)[family])
        row.update(
            offset=offset,
            epoch=decoded.epoch,
            batch_timestamp_ms=decoded.timestamp_ms,
            control=decoded.control,
            record_type=type(record).__name__,
            version=record.VERSION,
        )
        for spec in schema.RECORD_COLUMNS[type(record)]:
            value = getattr(record, spec.field)
            if isinstance(value, Uuid):
                value = str(value)
            elif spec.kind == "entity":
                value = arrow_batches.client_quota_entity_json(
                    [(e.entity_type, e.entity_name) for e in value]
                )
            elif isinstance(value, tuple):
                value = [
                    {"name": v.name, "host": v.host, "port": v.port}
                    if isinstance(v, BrokerEndpoint)
                    else v
                    for v in value
                ]
            if "." in spec.column:
                struct, name = spec.column.split(".")
                row[struct][name] = value
            else:
                row[spec.column] = value
        rows.append(row)
    return rows


SAMPLES: list[Record] = [record for _, batch in every_record_type() for record in batch] + [
    SnapshotHeader(0, 12),
    SnapshotFooter(0),
    PartitionChangeRecord(TOPIC_B, 3),
    PartitionChangeRecord(TOPIC_B, 3, (1,), 2, (1, 2), 9, 10),
    RegisterBrokerRecord(5, INCARNATION, 2**62, (), None, False),
    ClientQuotaRecord(
        (ClientQuotaEntityData("user", "alice"), ClientQuotaEntityData("client-id", None)),
        "producer_byte_rate",
        1024.0,
        remove=False,
    ),
]
BAD_VALUES: list[Any] = [
    None,
    True,
    False,
    -(2**63),
    -2,
    -1,
    0,
    1,
    127,
    128,
    2**15 - 1,
    2**15,
    2**31 - 1,
    2**31,
    2**63 - 1,
    2**64 - 1,
    1.0,
    1.5,
    "",
    "x",
    b"x",
    b"\x01" * 16,
    b"\x01" * 17,
    (),
    (1,),
    (-1,),
    (2**31,),
    (True,),
    (1.0,),
    ("a",),
    ((1,),),
    (None,),
    (("n", "h", 1),),
    (("n", "h", -1),),
    (("n", "h"),),
    ((b"n", "h", 1),),
    {"a": 1},
]


@pytest.mark.parametrize("record", SAMPLES, ids=lambda r: type(r).__name__)
def test_fast_decoder_accepts_exactly_what_the_record_classes_accept(record: Record) -> None:
    """Every field of every record type, set to each of many wire values: the columnar decoder
    either gives the reference decoder's rows or raises with the reference decoder's error."""
    wire = record_to_wire(record)
    control = is_control_record(record)
    for index in range(len(wire[2])):
        for bad in BAD_VALUES:
            fields = list(wire[2])
            fields[index] = bad
            frame = _frame([[wire[0], wire[1], fields]], control=control)
            try:
                expected = _reference_rows(frame)
            except RecordDecodeError as exc:
                with pytest.raises(LogReadError) as caught:
                    _decode(frame)
                assert str(exc) in str(caught.value), (record, index, bad)
                continue
            assert _decode(frame) == expected, (record, index, bad)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda w: [[True, 0, w[0][2]]], "unknown metadata record type True"),
        (lambda w: [[2, 1, w[0][2]]], "unsupported version 1 of TopicRecord"),
        (lambda w: [[77, 0, []]], "unknown metadata record type 77"),
        (lambda w: [[2, 0]], "a metadata record is the array [type, version, fields]"),
        (lambda w: [[2, 0, w[0][2][:2]]], "TopicRecord v0 has 3 fields"),
        (lambda w: [[1002, 0, [1, 1, [1]]]], "a non-control batch holds LeaderChangeMessage"),
        (lambda w: [[2, 0, w[0][2]], [2**64 - 1, 0, []]], "unknown metadata record type"),
    ],
)
def test_malformed_record_arrays_are_reported_not_skipped(mutate: Any, message: str) -> None:
    wire = [record_to_wire(TopicRecord("orders", TOPIC_A, False))]
    with pytest.raises(LogReadError, match="cannot decode the batch at base offset 0") as caught:
        _decode(_frame(mutate(wire)))
    assert message in str(caught.value)


def _body_frame(body: dict[str, Any], *, tail: bytes = b"", count: int = 1) -> Any:
    return log_files.Frame(0, 0, 1, count, pack_msgpack(body) + tail)


_BODY: dict[str, Any] = {
    "base_offset": 0,
    "epoch": 1,
    "timestamp_ms": 5,
    "control": False,
    "records": [record_to_wire(TopicRecord("orders", TOPIC_A, False))],
}


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (_body_frame({**_BODY, "extra": 1}), "unexpected keys ['extra']"),
        (_body_frame({k: v for k, v in _BODY.items() if k != "epoch"}), "missing keys"),
        (_body_frame(_BODY, tail=b"\x00"), "not valid msgpack"),
        (_body_frame({**_BODY, "epoch": True}), "epoch must be an int"),
        (_body_frame({**_BODY, "epoch": 2**31}), "epoch must be an int"),
        (_body_frame({**_BODY, "timestamp_ms": -1}), "timestamp_ms must be an int"),
        (_body_frame({**_BODY, "control": 1}), "control must be a bool"),
        (_body_frame({**_BODY, "control": True}), "a control batch holds TopicRecord"),
        (_body_frame({**_BODY, "records": []}), "records must be a non-empty array"),
        (_body_frame(_BODY, count=2), "disagrees with the body's"),
        (
            log_files.Frame(
                0, 0, 1, 1, pack_msgpack(_BODY).replace(b"orders", b"\xff\xfe\xfd\xfc\xfb\xfa")
            ),
            "not valid msgpack",
        ),
    ],
)
def test_the_typed_decoding_leaves_envelope_errors_to_the_reference(
    frame: Any, message: str
) -> None:
    """Whatever is wrong with a batch body, the error is the reference decoder's."""
    with pytest.raises(LogReadError, match="cannot decode the batch at base offset 0") as caught:
        _decode(frame)
    assert message in str(caught.value)


def test_fast_and_reference_paths_agree_on_a_mixed_log(tmp_path: Path) -> None:
    """A generated history (several batches, every common type) read both ways."""
    rng = random.Random(7)
    batches: list[tuple[int, list[Record]]] = [(1, [LeaderChangeMessage(1, 1, (1, 2, 3))])]
    topics = [Uuid.random(rng) for _ in range(20)]
    for number in range(60):
        records: list[Record] = []
        for _ in range(rng.randrange(1, 40)):
            topic = rng.choice(topics)
            kind = rng.random()
            if kind < 0.4:
                replicas = tuple(rng.sample(range(6), 3))
                records.append(PartitionRecord(topic, rng.randrange(8), replicas, replicas, 1))
            elif kind < 0.8:
                records.append(PartitionChangeRecord(topic, 0, isr=rng.choice([None, (1,)])))
            elif kind < 0.9:
                records.append(ConfigRecord(2, f"t{number}", "k", rng.choice([None, "v"])))
            else:
                records.append(TopicRecord(f"t{number}", topic, rng.random() < 0.1))
        batches.append((1, records))
    write_log(tmp_path / METADATA_DIR, batches, segment_bytes=4096)
    (partition,) = plan_partitions(ReadOptions(str(tmp_path)))[:1]
    frames = list(log_files.iter_frames(partition))
    fast = arrow_batches.chunk_to_batches(_chunk(frames, fast=True), None)
    reference = arrow_batches.chunk_to_batches(_chunk(frames, fast=False), None)
    assert [b.to_pylist() for b in fast] == [b.to_pylist() for b in reference]
    expected = [row for frame in frames for row in _reference_rows(frame)]
    got = sorted(pa.Table.from_batches(fast).to_pylist(), key=lambda row: row["offset"])
    assert got == expected


def _chunk(frames: list[Any], *, fast: bool) -> Any:
    chunk = typed_decode.Chunk()
    for frame in frames:
        if fast:
            typed_decode.collect_fast(chunk, frame, 0, None, path="x")
        else:
            typed_decode.collect_reference(chunk, frame, 0, None, path="x")
    return chunk


# ----- listing, ranges, tails ---------------------------------------------------------------


def history(batches: int) -> list[tuple[int, list[Record]]]:
    """``batches`` batches of 1-3 records each, epochs 1 then 2."""
    result: list[tuple[int, list[Record]]] = [(1, [LeaderChangeMessage(1, 1, (1, 2, 3))])]
    for number in range(1, batches):
        records: list[Record] = [
            PartitionChangeRecord(TOPIC_A, number % 3, leader=number % 3)
            for _ in range(1 + number % 3)
        ]
        result.append((1 if number < batches // 2 else 2, records))
    return result


def test_partitions_one_per_segment_and_offset_ranges_prune_them(tmp_path: Path) -> None:
    write_log(tmp_path / METADATA_DIR, history(40))
    segments, checkpoints = list_log_files(tmp_path)  # metadata.log.dir is accepted
    assert len(segments) >= 4
    assert checkpoints == []
    assert [p.file for p in plan_partitions(ReadOptions(str(tmp_path)))] == segments
    all_rows = read_rows(tmp_path)
    assert [row["offset"] for row in all_rows] == list(range(len(all_rows)))
    start, end = segments[1].base_offset + 1, segments[3].base_offset
    ranged = plan_partitions(ReadOptions(str(tmp_path), start_offset=start, end_offset=end))
    assert [p.file for p in ranged] == segments[1:3]
    assert [row["offset"] for row in rows_of(ranged)] == list(range(start, end))
    # Ranges across batch boundaries, in the middle of a segment.
    assert [row["offset"] for row in read_rows(tmp_path, start_offset=7, end_offset=8)] == [7]
    assert read_rows(tmp_path, start_offset=5, end_offset=5) == []
    assert read_rows(tmp_path, start_offset=10**9) == []


def test_offset_filters_become_a_range() -> None:
    from pyspark.sql.datasource import (  # noqa: PLC0415
        EqualTo,
        GreaterThan,
        GreaterThanOrEqual,
        In,
        IsNull,
        LessThan,
        LessThanOrEqual,
    )

    offset = ("offset",)
    assert source.offset_bounds([]) == (0, None)
    assert source.offset_bounds([GreaterThanOrEqual(offset, 10)]) == (10, None)
    assert source.offset_bounds([GreaterThan(offset, 10), LessThan(offset, 20)]) == (11, 20)
    assert source.offset_bounds([LessThanOrEqual(offset, 20), GreaterThan(offset, 3)]) == (4, 21)
    assert source.offset_bounds([EqualTo(offset, 7)]) == (7, 8)
    assert source.offset_bounds([In(offset, (9, 3, 5))]) == (3, 10)
    assert source.offset_bounds([GreaterThan(offset, 10), LessThan(offset, 5)]) == (11, 5)
    # Other columns, non-integer values, IS NULL: no bound.
    assert source.offset_bounds([GreaterThan(("epoch",), 3), IsNull(offset)]) == (0, None)
    assert source.offset_bounds([EqualTo(offset, "7"), In(offset, (1, "x"))]) == (0, None)


def test_pushed_bounds_skip_segments_but_not_checkpoints(tmp_path: Path) -> None:
    write_log(tmp_path / METADATA_DIR, history(40))
    segments, _ = list_log_files(tmp_path)
    options = ReadOptions(str(tmp_path))
    start = segments[2].base_offset + 1
    pushed = plan_partitions(options, (start, None))
    assert [p.file for p in pushed] == segments[2:]
    assert next(row["offset"] for row in rows_of(pushed)) == start
    # An empty range plans no segment at all.
    assert plan_partitions(options, (11, 5)) == []
    assert plan_partitions(dataclasses.replace(options, end_offset=3), (5, None)) == []


def test_a_log_being_appended_is_read_up_to_its_last_complete_batch(tmp_path: Path) -> None:
    directory = tmp_path / METADATA_DIR
    written = write_log(directory, history(30))
    segments, _ = list_log_files(directory)
    last = Path(segments[-1].path)
    complete = read_rows(directory)
    next_offset = written[-1].end_offset
    extra = encode_frame(
        encode_batch(
            base_offset=next_offset, epoch=2, timestamp_ms=1, records=[NoOpRecord(), NoOpRecord()]
        )
    )
    before = {path: path.read_bytes() for path in directory.iterdir()}
    for cut in (1, 5, 24, len(extra) - 1):  # a write in progress: every partial frame length
        with last.open("ab") as f:
            f.write(extra[:cut])
        assert read_rows(directory) == complete
        os.truncate(last, len(before[last]))
    # A zero-filled tail (blocks allocated, never written) is a tail too.
    with last.open("ab") as f:
        f.write(bytes(100))
    assert read_rows(directory) == complete
    os.truncate(last, len(before[last]))
    # Reading never modified anything.
    assert {path: path.read_bytes() for path in directory.iterdir()} == before
    # Once the frame is whole, it is read.
    with last.open("ab") as f:
        f.write(extra)
    assert [row["offset"] for row in read_rows(directory)][-2:] == [next_offset, next_offset + 1]


def test_the_size_at_listing_bounds_what_a_partition_reads(tmp_path: Path) -> None:
    """A DataFrame is the log as planned: batches appended after listing are not seen."""
    directory = tmp_path / METADATA_DIR
    written = write_log(directory, history(10), segment_bytes=1 << 20)
    partitions = plan_partitions(ReadOptions(str(directory)))
    log = SegmentedLog.open(directory)
    log.append(
        [
            encode_batch(
                base_offset=written[-1].end_offset, epoch=2, timestamp_ms=1, records=[NoOpRecord()]
            )
        ]
    )
    log.close()
    assert len(rows_of(partitions)) == written[-1].end_offset
    assert len(read_rows(directory)) == written[-1].end_offset + 1


def test_damage_followed_by_a_valid_batch_is_corruption(tmp_path: Path) -> None:
    directory = tmp_path / METADATA_DIR
    write_log(directory, history(30))
    segments, _ = list_log_files(directory)
    middle = Path(segments[1].path)
    data = bytearray(middle.read_bytes())
    data[30] ^= 0xFF  # inside the first frame: a later frame of the segment is still valid
    middle.write_bytes(bytes(data))
    with pytest.raises(LogReadError, match="yet a valid batch follows") as caught:
        read_rows(directory)
    assert caught.value.path == str(middle)
    # Damage at the end of a non-last segment, followed by a valid later segment.
    data[30] ^= 0xFF
    middle.write_bytes(bytes(data[:-3]))
    with pytest.raises(LogReadError, match="yet the later segment"):
        read_rows(directory)


def test_a_missing_segment_is_reported(tmp_path: Path) -> None:
    directory = tmp_path / METADATA_DIR
    write_log(directory, history(30))
    segments, _ = list_log_files(directory)
    Path(segments[2].path).unlink()
    with pytest.raises(LogReadError, match="a missing, extra or renamed segment"):
        read_rows(directory)


def test_checkpoints_are_partitions_only_with_include_snapshots(tmp_path: Path) -> None:
    directory = tmp_path / METADATA_DIR
    write_log(directory, history(6))
    end_offset, epoch = 12, 2
    checkpoint = directory / f"{end_offset:020d}-{epoch:010d}.checkpoint"
    snapshot = [
        encode_batch(
            base_offset=0, epoch=epoch, timestamp_ms=9, records=[SnapshotHeader(0, 9)], control=True
        ),
        encode_batch(
            base_offset=1, epoch=epoch, timestamp_ms=9, records=[TopicRecord("t", TOPIC_B)]
        ),
        encode_batch(
            base_offset=2, epoch=epoch, timestamp_ms=9, records=[SnapshotFooter(0)], control=True
        ),
    ]
    checkpoint.write_bytes(b"".join(encode_frame(batch) for batch in snapshot))
    log_rows = read_rows(directory)
    assert all(row["snapshot_end_offset"] is None for row in log_rows)
    rows = read_rows(directory, include_snapshots=True)
    snapshot_rows = [row for row in rows if row["snapshot_end_offset"] == end_offset]
    assert [row["record_type"] for row in snapshot_rows] == [
        "SnapshotHeader",
        "TopicRecord",
        "SnapshotFooter",
    ]
    assert snapshot_rows[1]["topic_id"] == str(TOPIC_B)
    assert len(rows) == len(log_rows) + 3
    assert (
        read_rows(directory, include_snapshots=True, end_offset=11)[-1]["snapshot_end_offset"]
        is None
    )
    # A checkpoint is renamed into place whole: a torn one is corrupt, not a tail.
    checkpoint.write_bytes(checkpoint.read_bytes()[:-2])
    with pytest.raises(LogReadError, match="a checkpoint is written whole"):
        read_rows(directory, include_snapshots=True)


def test_options_are_checked() -> None:
    assert ReadOptions.parse({"path": "/x", "StartOffset": "5", "endoffset": "9"}) == ReadOptions(
        "/x", 5, 9
    )
    assert ReadOptions.parse({"path": "/x", "includeSnapshots": "TRUE"}).include_snapshots
    assert ReadOptions.parse({"path": "/x", "splitBytes": "0"}).split_bytes == 0
    assert ReadOptions.parse({"path": "/x"}).split_bytes == source.SPLIT_BYTES_DEFAULT
    with pytest.raises(ValueError, match="splitBytes must be an integer"):
        ReadOptions.parse({"path": "/x", "splitBytes": "1MB"})
    with pytest.raises(ValueError, match="unknown option"):
        ReadOptions.parse({"path": "/x", "startOfset": "5"})
    with pytest.raises(ValueError, match="needs a path"):
        ReadOptions.parse({})
    with pytest.raises(ValueError, match="endOffset"):
        ReadOptions.parse({"path": "/x", "startOffset": "5", "endOffset": "4"})
    with pytest.raises(ValueError, match="integer offset"):
        ReadOptions.parse({"path": "/x", "endOffset": "ten"})
    with pytest.raises(ValueError, match="true or false"):
        ReadOptions.parse({"path": "/x", "includeSnapshots": "maybe"})
    assert ReadOptions.parse({"path": "/x", "filterPushdown": "true"}).filter_pushdown
    assert not ReadOptions.parse({"path": "/x"}).filter_pushdown


def test_a_missing_directory_is_reported(tmp_path: Path) -> None:
    with pytest.raises(LogReadError, match="no such directory"):
        list_log_files(tmp_path / "nope")


# ----- through Spark ------------------------------------------------------------------------


@pytest.mark.spark
def test_spark_reads_typed_rows_in_parallel(spark: Any, tmp_path: Path) -> None:
    directory = tmp_path / METADATA_DIR
    write_log(directory, history(30))
    expected = read_rows(directory)
    df = source.load(spark, tmp_path)
    assert df.schema == spark_schema()
    assert df.rdd.getNumPartitions() == len(list_log_files(directory)[0]) > 1
    assert [r.asDict(recursive=True) for r in df.orderBy("offset").collect()] == expected
    # Typed columns are queryable as they are: no JSON parsing.
    changes = df.filter(F.col("record_type") == "PartitionChangeRecord")
    leaders = changes.groupBy("partition.leader").count().collect()
    assert {row["leader"]: row["count"] for row in leaders} == Counter(
        row["partition"]["leader"]
        for row in expected
        if row["record_type"] == "PartitionChangeRecord"
    )
    ranged = source.load(spark, directory, startOffset=10, endOffset=20).orderBy("offset")
    assert [row["offset"] for row in ranged.select("offset").collect()] == list(range(10, 20))
    # Segments read as byte ranges: more tasks, the same rows.
    split = source.load(spark, directory, splitBytes=150)
    assert split.rdd.getNumPartitions() > df.rdd.getNumPartitions()
    assert [r.asDict(recursive=True) for r in split.orderBy("offset").collect()] == expected


@pytest.mark.spark
def test_where_on_offset_skips_segments(spark: Any, tmp_path: Path) -> None:
    """pushFilters (pyspark >= 4.1, option filterPushdown): ``where("offset >= N")`` plans no
    partition for the segments before N; every filter is still applied to the rows."""
    directory = tmp_path / METADATA_DIR
    write_log(directory, history(30))
    segments, _ = list_log_files(directory)
    expected = [row["offset"] for row in read_rows(directory)]

    def pushing() -> Any:  # a new DataFrame per filtered query (see the option's docstring)
        return source.load(spark, directory, filterPushdown=True)

    start = segments[-2].base_offset + 1
    late = pushing().where(f"offset >= {start}")
    assert late.rdd.getNumPartitions() == 2 < len(segments)
    assert sorted(r["offset"] for r in late.select("offset").collect()) == [
        o for o in expected if o >= start
    ]
    assert pushing().where("offset = 5").rdd.getNumPartitions() == 1
    either = pushing().where("offset < 3 or offset > 40").select("offset").collect()
    assert sorted(r["offset"] for r in either) == [o for o in expected if o < 3 or o > 40]
    assert pushing().where("offset > 10 and offset < 5").count() == 0
    # Without the option, the same rows, every segment read.
    plain = source.load(spark, directory).where(f"offset >= {start}")
    assert plain.rdd.getNumPartitions() == len(segments)
    assert plain.count() == late.count()


@pytest.mark.spark
def test_pyspark_still_reuses_pushed_partitions_across_queries(spark: Any, tmp_path: Path) -> None:
    """Why filterPushdown is off by default: PySpark 4.3.0 keeps the partitions planned for a
    filtered query on the data source, and a later query of the same DataFrame that pushes
    nothing reads only them. When this fails, PySpark fixed it (upstream keeps that state on
    each scan now): make filterPushdown the default in load()."""
    directory = tmp_path / METADATA_DIR
    write_log(directory, history(30))
    total = len(read_rows(directory))
    df = source.load(spark, directory, filterPushdown=True)
    start = list_log_files(directory)[0][-2].base_offset + 1
    assert df.where(f"offset >= {start}").rdd.getNumPartitions() == 2
    assert df.count() < total  # the leak: the unfiltered count reads the two segments only
    assert source.load(spark, directory).count() == total


@pytest.mark.spark
def test_spark_reads_torn_tails_and_surfaces_decode_errors(spark: Any, tmp_path: Path) -> None:
    directory = tmp_path / METADATA_DIR
    written = write_log(directory, history(12))
    end = written[-1].end_offset
    last = Path(list_log_files(directory)[0][-1].path)
    size = last.stat().st_size
    partial = encode_frame(
        encode_batch(base_offset=end, epoch=2, timestamp_ms=1, records=[NoOpRecord()])
    )
    with last.open("ab") as f:
        f.write(partial[:-4])
    assert source.load(spark, directory).count() == end
    body = {"base_offset": end, "epoch": 2, "timestamp_ms": 1, "control": False}
    bad = LogBatch(end, 2, 1, pack_msgpack({**body, "records": [[99, 0, []]]}))
    os.truncate(last, size)
    with last.open("ab") as f:
        f.write(encode_frame(bad))
    with pytest.raises(Exception, match="unknown metadata record type 99"):
        source.load(spark, directory).count()


# ----- what a read covers: the base of a state as of N (no Spark) ----------------------------


def test_coverage_picks_the_newest_snapshot_the_log_continues_from(tmp_path: Path) -> None:
    from quorum.analytics.jobs import Coverage, StateNotAvailableError  # noqa: PLC0415

    whole = Coverage(0)
    assert [whole.base_for(n) for n in (0, 5, 10**9)] == [0, 0, 0]
    assert whole.earliest() == 0

    # Snapshots ending at 100 and 250, the log from 200 (a controller kept the older snapshot
    # and cleaned the segments before the newer one).
    cleaned = Coverage(200, (100, 250))
    assert cleaned.base_for(99) == 100  # exactly the older snapshot
    assert cleaned.base_for(249) == 250  # exactly the newer one
    assert cleaned.base_for(250) == cleaned.base_for(10**6) == 250  # then the log after it
    assert cleaned.available() == ([99], 249)
    assert cleaned.earliest() == 99
    for n in (0, 98, 100, 150, 210, 248):
        with pytest.raises(StateNotAvailableError, match="earliest offset available is 99"):
            cleaned.base_for(n)
    with pytest.raises(StateNotAvailableError, match=r"records 100\.\.199 are gone"):
        cleaned.base_for(150)
    # A log from 200 read without its snapshots determines no state at all.
    with pytest.raises(StateNotAvailableError, match="includeSnapshots"):
        Coverage(200).base_for(300)
    assert Coverage(200).earliest() is None
    # Everything cleaned behind the snapshot: no log rows, the snapshot is the state.
    assert Coverage.from_parts(None, [300]) == Coverage(300, (300,))
    assert Coverage.from_parts(None, [300]).base_for(10**6) == 300
    # A log from 0 read with a snapshot: the snapshot is the base from its end on.
    both = Coverage(0, (50,))
    assert [both.base_for(n) for n in (10, 48, 49, 60)] == [0, 0, 50, 50]
    assert both.oldest_onward_base() == 0 and cleaned.oldest_onward_base() == 250

    # From the file names alone, with the options of the load.
    directory = tmp_path / METADATA_DIR
    write_log(directory, history(30))
    segments, _ = list_log_files(directory)
    for end in (12, 20):
        (directory / f"{end:020d}-{2:010d}.checkpoint").write_bytes(b"")
    assert Coverage.of_listing(directory) == Coverage(0)
    assert Coverage.of_listing(directory, includeSnapshots=True) == Coverage(0, (12, 20))
    assert Coverage.of_listing(directory, includeSnapshots=True, endOffset=15) == Coverage(0, (12,))
    for segment in segments[:2]:
        Path(segment.path).unlink()
    assert Coverage.of_listing(directory, includeSnapshots=True) == Coverage(
        segments[2].base_offset, (12, 20)
    )


# ----- segments read as several byte ranges ---------------------------------------------------


def write_indexed_log(directory: Path, batches: Sequence[tuple[int, Sequence[Record]]]) -> None:
    """Like ``write_log``, with 4 KiB segments and an offset index entry every ~200 bytes."""
    log = SegmentedLog.open(directory, segment_bytes_max=4096, index_interval_bytes=200)
    offset = 0
    try:
        for epoch, records in batches:
            batch = encode_batch(
                base_offset=offset, epoch=epoch, timestamp_ms=timestamp_ms(offset), records=records
            )
            log.append([batch])
            offset = batch.end_offset
    finally:
        log.close()


def wide_history(batches: int) -> list[tuple[int, list[Record]]]:
    """Batches of 1-9 partition changes (so frames have many sizes), epochs 1 then 2."""
    return [
        (
            1 if number < batches // 2 else 2,
            [
                PartitionChangeRecord(TOPIC_A, number % 5, leader=n % 3)
                for n in range(number % 9 + 1)
            ],
        )
        for number in range(batches)
    ]


def test_segments_are_read_as_byte_ranges_that_give_the_same_rows(tmp_path: Path) -> None:
    directory = tmp_path / METADATA_DIR
    write_indexed_log(directory, wide_history(400))
    segments, _ = list_log_files(directory)
    assert len(segments) >= 3
    whole = read_rows(directory, split_bytes=0)
    assert len(plan_partitions(ReadOptions(str(directory), split_bytes=0))) == len(segments)
    assert [row["offset"] for row in whole] == list(range(len(whole)))
    for split in (97, 333, 1000, 4096):
        partitions = plan_partitions(ReadOptions(str(directory), split_bytes=split))
        assert len(partitions) >= len(segments) * min(4096 // split, 3)
        offsets = [row["offset"] for p in partitions for row in rows_of([p])]
        assert sorted(offsets) == list(range(len(whole))), split  # each batch in one range
        assert rows_of(partitions) == whole
    # Offset ranges inside split segments.
    inside = read_rows(directory, split_bytes=300, start_offset=50, end_offset=1200)
    assert inside == [row for row in whole if 50 <= row["offset"] < 1200]
    # A damaged or missing offset index only costs a walk from the segment's start.
    for index in directory.glob("*.index"):
        index.write_bytes(bytes(range(200)))
    assert read_rows(directory, split_bytes=300) == whole
    for index in directory.glob("*.index"):
        index.unlink()
    assert read_rows(directory, split_bytes=300) == whole


def test_byte_ranges_keep_the_tail_and_corruption_rules(tmp_path: Path) -> None:
    directory = tmp_path / METADATA_DIR
    write_indexed_log(directory, wide_history(300))
    segments, _ = list_log_files(directory)
    whole = read_rows(directory, split_bytes=0)
    last = Path(segments[-1].path)
    size = last.stat().st_size
    partial = encode_frame(
        encode_batch(base_offset=len(whole), epoch=2, timestamp_ms=1, records=[NoOpRecord()])
    )
    with last.open("ab") as f:
        f.write(partial[:-3])  # a batch being appended
    assert read_rows(directory, split_bytes=200) == whole
    os.truncate(last, size)
    # A flipped byte in the middle of a segment, valid batches after it: corruption, whichever
    # range it falls in.
    middle = Path(segments[1].path)
    data = bytearray(middle.read_bytes())
    data[len(data) // 2] ^= 0xFF
    middle.write_bytes(bytes(data))
    with pytest.raises(LogReadError, match="yet a valid batch follows"):
        read_rows(directory, split_bytes=200)
