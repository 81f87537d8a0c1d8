"""The records of __consumer_offsets (broker/groups/records.py) against bytes written from
Kafka's schemas by hand (OffsetCommitKey/Value, GroupMetadataKey/Value), round trips, the
batches that carry them, and the partition of a group (Java's String.hashCode)."""

from __future__ import annotations

import random
import struct

import pytest

from broker.groups.partitioning import java_string_hash, partition_for
from broker.groups.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordFormatError,
    build_batch,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    iter_records,
    subscription_topics,
)
from tests.record_batches import decode_batches


def kstring(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def test_offset_commit_bytes_are_kafkas() -> None:
    key = OffsetCommitKey("g", "orders", 3)
    assert encode_key(key) == struct.pack(">h", 1) + kstring("g") + kstring("orders") + struct.pack(
        ">i", 3
    )
    value = OffsetCommitValue(42, 5, "meta", 1_700_000_000_000)
    assert encode_value(value) == (
        struct.pack(">hqi", 3, 42, 5) + kstring("meta") + struct.pack(">q", 1_700_000_000_000)
    )
    assert decode_key(encode_key(key)) == key
    assert decode_value(key, encode_value(value)) == value
    # Version 1 (with an expire timestamp), as older Kafka brokers wrote it.
    v1 = struct.pack(">hq", 1, 7) + kstring("") + struct.pack(">qq", 10, 20)
    assert decode_value(key, v1) == OffsetCommitValue(7, -1, "", 10, 20)


def test_group_metadata_bytes_are_kafkas() -> None:
    key = GroupMetadataKey("g")
    assert encode_key(key) == struct.pack(">h", 2) + kstring("g")
    member = MemberMetadata("m-1", "i-1", "client", "/127.0.0.1", 300_000, 45_000, b"sub", b"as")
    value = GroupMetadataValue("consumer", 4, "range", "m-1", 99, (member,))
    expected = (
        struct.pack(">h", 3)
        + kstring("consumer")
        + struct.pack(">i", 4)
        + kstring("range")
        + kstring("m-1")
        + struct.pack(">qi", 99, 1)
        + kstring("m-1")
        + kstring("i-1")
        + kstring("client")
        + kstring("/127.0.0.1")
        + struct.pack(">ii", 300_000, 45_000)
        + struct.pack(">i", 3)
        + b"sub"
        + struct.pack(">i", 2)
        + b"as"
    )
    assert encode_value(value) == expected
    assert decode_value(key, expected) == value
    empty = GroupMetadataValue("", 5, None, None, -1, ())
    assert decode_value(key, encode_value(empty)) == empty


def test_unknown_record_types_are_skipped_and_garbage_refused() -> None:
    assert decode_key(struct.pack(">h", 3) + kstring("g")) is None  # a KIP-848 record
    with pytest.raises(RecordFormatError):
        decode_key(b"\x00")
    with pytest.raises(RecordFormatError):
        decode_value(GroupMetadataKey("g"), struct.pack(">h", 9))
    rng = random.Random(1)
    for _ in range(2_000):
        data = rng.randbytes(rng.randint(0, 40))
        try:
            key = decode_key(data)
            if key is not None:
                decode_value(key, rng.randbytes(rng.randint(0, 60)))
        except RecordFormatError:
            pass


def test_batches_are_valid_magic_2_and_read_back() -> None:
    records = [
        (encode_key(OffsetCommitKey("g", "t", 0)), encode_value(OffsetCommitValue(1, -1, "", 5))),
        (encode_key(GroupMetadataKey("g")), None),
    ]
    data = build_batch(records, 1_000)
    (batch,) = decode_batches(data)  # the independent decoder checks the CRC
    assert [(r.key, r.value) for r in batch.records] == records
    assert list(iter_records(data)) == [(0, records[0][0], records[0][1]), (1, records[1][0], None)]
    assert list(iter_records(data[:-1])) == []  # a partial batch is ignored


def test_group_partitions_follow_javas_hash() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(2**31)  # Integer.MIN_VALUE
    assert partition_for("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) is 0
    assert java_string_hash("é") == 0xE9
    assert java_string_hash("\U0001f600") == 0xD83D * 31 + 0xDE00  # UTF-16 code units
    assert partition_for("my-group", 50) == abs(java_string_hash("my-group")) % 50


def test_subscription_topics() -> None:
    metadata = struct.pack(">hi", 1, 2) + kstring("a") + kstring("b") + struct.pack(">i", -1)
    assert subscription_topics(metadata) == {"a", "b"}
    assert subscription_topics(b"\x00") == set()
