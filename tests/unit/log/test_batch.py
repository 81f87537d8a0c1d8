"""The record-batch codec and a leader's checks before an append (broker/log/batch.py), against
batches encoded from the format's documented layout (tests/record_batches.py)."""

from __future__ import annotations

import struct

import crc32c
import pytest

from broker.log import errors
from broker.log.batch import (
    ProducedBatch,
    TimestampRules,
    batches_below,
    check_produced,
    check_replicated,
    iter_headers,
    read_header,
    record_timestamps,
    stamp,
)
from tests.record_batches import Record, decode_batches, encode_batch

NOW_MS = 1_700_000_000_000


def records(count: int = 3, timestamp: int = NOW_MS) -> list[Record]:
    return [
        Record(f"k{i}".encode(), f"value-{i}".encode() * 3, timestamp + i, (("h", b"x"),))
        for i in range(count)
    ]


def check(data: bytes | None, **kwargs: object) -> ProducedBatch:
    options: dict[str, object] = {
        "produce_version": 9,
        "max_message_bytes": 1_048_588,
        "timestamps": TimestampRules(),
        "now_ms": NOW_MS,
    }
    options.update(kwargs)
    return check_produced(data, **options)  # type: ignore[arg-type]


def refused(data: bytes | None, **kwargs: object) -> errors.RecordBatchError:
    with pytest.raises(errors.RecordBatchError) as caught:
        check(data, **kwargs)
    assert str(caught.value)  # every refusal says what was wrong
    return caught.value


def with_crc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


def test_a_valid_batch_passes_with_its_header_read_at_kafkas_offsets() -> None:
    batch = encode_batch(records(5))
    checked = check(batch)
    assert checked.data == batch
    header = checked.header
    assert header.base_offset == 0 and header.magic == 2
    assert header.batch_length == len(batch) - 12
    assert header.record_count == 5 and header.last_offset_delta == 4
    assert (header.base_timestamp, header.max_timestamp) == (NOW_MS, NOW_MS + 4)
    assert header.producer_id == -1
    # The documented layout, field by field (https://kafka.apache.org/documentation/#recordbatch).
    assert struct.unpack_from(">q", batch, 0)[0] == 0
    assert struct.unpack_from(">i", batch, 8)[0] == len(batch) - 12
    assert batch[16] == 2
    assert struct.unpack_from(">I", batch, 17)[0] == crc32c.crc32c(batch[21:])
    assert struct.unpack_from(">i", batch, 57)[0] == 5


def test_trailing_bytes_after_the_batch_are_dropped_as_kafka_trims_them() -> None:
    batch = encode_batch(records(2))
    assert check(batch + b"\x00\x01\x02").data == batch


@pytest.mark.parametrize(
    ("mangle", "code"),
    [
        (lambda b: b"", errors.INVALID_RECORD),
        (lambda b: None, errors.INVALID_RECORD),
        (lambda b: b[:40], errors.INVALID_RECORD),  # the batch claims more than was sent
        (lambda b: b[:8] + struct.pack(">i", -5) + b[12:], errors.CORRUPT_MESSAGE),
        (lambda b: b[:8] + struct.pack(">i", 13) + b[12:], errors.CORRUPT_MESSAGE),
        (lambda b: b[:16] + b"\x07" + b[17:], errors.CORRUPT_MESSAGE),  # magic 7
        (lambda b: b[:16] + b"\x01" + b[17:], errors.INVALID_RECORD),  # magic 1
        (lambda b: b[:16] + b"\x00" + b[17:], errors.INVALID_RECORD),  # magic 0
        (lambda b: b[:-1] + bytes([b[-1] ^ 1]), errors.CORRUPT_MESSAGE),  # CRC
        (lambda b: struct.pack(">q", 5) + b[8:], errors.INVALID_RECORD),  # base offset
        (lambda b: b + b, errors.INVALID_RECORD),  # two batches
    ],
    ids=[
        "empty",
        "null",
        "truncated",
        "negative-length",
        "length-13",
        "magic-7",
        "magic-1",
        "magic-0",
        "crc",
        "base-offset",
        "two-batches",
    ],
)
def test_malformed_batches_get_kafkas_error(mangle: object, code: int) -> None:
    batch = encode_batch(records(3))
    assert refused(mangle(batch), produce_version=9).error_code == code  # type: ignore[operator]


def test_record_count_and_last_offset_delta_must_agree() -> None:
    batch = bytearray(encode_batch(records(3)))
    struct.pack_into(">i", batch, 57, 4)  # recordCount 4, lastOffsetDelta 2
    assert refused(with_crc(batch)).error_code == errors.INVALID_RECORD
    struct.pack_into(">i", batch, 57, 0)
    struct.pack_into(">i", batch, 23, -1)
    assert refused(with_crc(batch)).error_code == errors.INVALID_RECORD


def test_an_uncompressed_batch_cannot_claim_more_records_than_its_bytes_hold() -> None:
    batch = bytearray(encode_batch(records(1)))
    struct.pack_into(">i", batch, 23, 99_999)
    struct.pack_into(">i", batch, 57, 100_000)
    assert refused(with_crc(batch)).error_code == errors.CORRUPT_MESSAGE


def test_size_against_max_message_bytes() -> None:
    batch = encode_batch(records(3))
    assert refused(batch, max_message_bytes=len(batch) - 1).error_code == errors.MESSAGE_TOO_LARGE
    assert check(batch, max_message_bytes=len(batch)).data == batch


def test_control_and_transactional_batches_are_refused_idempotent_ones_pass() -> None:
    control = encode_batch(records(1), attributes_extra=0x20)
    assert refused(control).error_code == errors.INVALID_RECORD
    transactional = encode_batch(
        records(1), attributes_extra=0x10, producer_id=7, producer_epoch=0, base_sequence=0
    )
    error = refused(transactional)
    assert error.error_code == errors.INVALID_TXN_STATE and "transactional" in str(error)
    idempotent = encode_batch(records(1), producer_id=7, producer_epoch=0, base_sequence=0)
    # Its sequences are the partition log's to check (tests/unit/log/test_producer_state.py).
    assert check(idempotent).header.producer_id == 7
    bad_sequence = encode_batch(records(1), producer_id=7, producer_epoch=0, base_sequence=-1)
    assert refused(bad_sequence).error_code == errors.INVALID_RECORD


def test_zstd_needs_produce_v7() -> None:
    batch = encode_batch(records(1), compression=4)
    assert refused(batch, produce_version=6).error_code == errors.UNSUPPORTED_COMPRESSION_TYPE
    assert check(batch, produce_version=7).header.compression == 4


def test_create_time_bounds_on_the_first_and_largest_timestamp() -> None:
    rules = TimestampRules(before_max_ms=1_000, after_max_ms=500)
    assert check(encode_batch(records(3, NOW_MS - 1_000)), timestamps=rules)
    late = refused(encode_batch(records(3, NOW_MS - 1_001)), timestamps=rules)
    assert late.error_code == errors.INVALID_TIMESTAMP
    assert f"[{NOW_MS - 1_000}, {NOW_MS + 500}]" in str(late)
    # the largest timestamp is NOW + 500 + 2: too far ahead
    ahead = refused(encode_batch(records(3, NOW_MS + 499)), timestamps=rules)
    assert ahead.error_code == errors.INVALID_TIMESTAMP and "largest" in str(ahead)
    # -1 (no timestamp) is never out of range
    assert check(encode_batch(records(1, -1)), timestamps=rules)


def test_a_producer_may_not_set_log_append_time() -> None:
    batch = encode_batch(records(1), attributes_extra=0x08)
    assert refused(batch).error_code == errors.INVALID_TIMESTAMP
    assert (
        refused(batch, timestamps=TimestampRules(log_append_time=True)).error_code
        == errors.INVALID_TIMESTAMP
    )


def test_stamp_sets_offset_and_epoch_outside_the_crc() -> None:
    batch = encode_batch(records(3))
    stamped = stamp(batch, 1234, 7, None)
    assert stamped[16:] == batch[16:]  # magic, CRC and everything after: as the client sent
    (decoded,) = decode_batches(bytes(stamped))
    assert decoded.base_offset == 1234 and decoded.leader_epoch == 7
    assert [r.offset for r in decoded.records] == [1234, 1235, 1236]
    assert decoded.records == [
        Record(r.key, r.value, r.timestamp, r.headers, 1234 + i) for i, r in enumerate(records(3))
    ]


def test_stamp_for_log_append_time_sets_max_timestamp_the_bit_and_a_new_crc() -> None:
    batch = encode_batch(records(3, NOW_MS - 50_000))
    stamped = stamp(batch, 0, 1, NOW_MS)
    (decoded,) = decode_batches(bytes(stamped))  # decode_batches checks the CRC
    assert decoded.attributes & 0x08
    assert decoded.max_timestamp == NOW_MS
    assert {r.timestamp for r in decoded.records} == {NOW_MS}
    header = read_header(stamped)
    assert header.log_append_time and header.max_timestamp == NOW_MS


def test_iter_headers_stops_at_an_incomplete_batch() -> None:
    one, two = (
        stamp(encode_batch(records(2)), 0, 0, None),
        stamp(encode_batch(records(4)), 2, 0, None),
    )
    data = bytes(one + two)
    assert [(p, o, s) for p, o, s in iter_headers(data)] == [
        (0, 0, len(one)),
        (len(one), 2, len(two)),
    ]
    assert [o for _, o, _ in iter_headers(data[:-1])] == [0]


@pytest.mark.parametrize("compression", [0, 1])
def test_record_timestamps_reads_uncompressed_and_gzip_batches(compression: int) -> None:
    batch = stamp(encode_batch(records(4), compression=compression), 10, 0, None)
    assert record_timestamps(bytes(batch)) == [(10 + i, NOW_MS + i) for i in range(4)]


def test_record_timestamps_cannot_read_snappy() -> None:
    batch = stamp(encode_batch(records(2), compression=2), 0, 0, None)
    assert record_timestamps(bytes(batch)) is None


def stored(base_offset: int, count: int, epoch: int = 4) -> bytes:
    """A batch as a leader stored it: offsets and partition leader epoch assigned."""
    return encode_batch(records(count), base_offset=base_offset, leader_epoch=epoch)


def test_check_replicated_returns_the_whole_contiguous_batches_of_a_fetch() -> None:
    fetched = stored(10, 3) + stored(13, 2) + stored(15, 4)
    headers = check_replicated(fetched, 10, 1 << 20)
    assert [(h.base_offset, h.last_offset, h.partition_leader_epoch) for h in headers] == [
        (10, 12, 4),
        (13, 14, 4),
        (15, 18, 4),
    ]
    assert sum(h.size for h in headers) == len(fetched)
    # A partial batch at the end is left out, wherever it is cut.
    last = len(fetched) - len(stored(15, 4))
    for cut in (last + 1, last + 12, last + 61, len(fetched) - 1):
        assert [h.base_offset for h in check_replicated(fetched[:cut], 10, 1 << 20)] == [10, 13]
    assert check_replicated(b"", 0, 1 << 20) == []
    # None: the first base offset is not checked, the rest must follow it: a gap is allowed
    # (a compacted leader's log has gaps), an overlap is not.
    assert len(check_replicated(fetched[len(stored(10, 3)) :], None, 1 << 20)) == 2
    assert len(check_replicated(stored(10, 3) + stored(14, 2), None, 1 << 20)) == 2
    with pytest.raises(errors.RecordBatchError) as caught:
        check_replicated(stored(10, 3) + stored(12, 2), None, 1 << 20)
    assert caught.value.error_code == errors.UNKNOWN_SERVER_ERROR
    assert "12" in str(caught.value) and "13" in str(caught.value)


def test_batches_below_keeps_whole_batches_whose_last_offset_is_below_the_bound() -> None:
    data = stored(0, 3) + stored(3, 2) + stored(5, 4)
    first, second = len(stored(0, 3)), len(stored(0, 3)) + len(stored(3, 2))
    assert [batches_below(data, limit) for limit in (0, 2, 3, 4, 5, 8, 9, 100)] == [
        0,
        0,
        first,
        first,
        second,
        second,
        len(data),
        len(data),
    ]
