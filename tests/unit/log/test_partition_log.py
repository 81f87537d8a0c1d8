"""One partition's log on real files (broker/log/partition_log.py): appends and reads, the
on-disk layout byte by byte (segments, .index, .timeindex, leader-epoch-checkpoint), rolls,
retention, recovery of a torn tail at every truncation point, and failed writes."""

from __future__ import annotations

import errno
import itertools
import os
import random
import struct
from pathlib import Path
from typing import Any

import pytest
import structlog

from broker.log import errors
from broker.log.batch import TimestampRules, check_produced
from broker.log.config import LogConfig
from broker.log.index import INDEX_INTERVAL_BYTES
from broker.log.partition_log import PartitionLog
from tests.record_batches import Record, decode_batches, encode_batch

NOW_MS = 1_700_000_000_000
LOGGER = structlog.get_logger("test")


def produced(count: int, *, value_bytes: int = 100, timestamp: int = NOW_MS, seed: int = 0) -> Any:
    rng = random.Random(seed)
    batch = encode_batch(
        [
            Record(
                f"key-{seed}-{i}".encode(),
                rng.randbytes(value_bytes),
                timestamp + i,
                (("trace", rng.randbytes(4)),),
            )
            for i in range(count)
        ]
    )
    return check_produced(
        batch,
        produce_version=9,
        max_message_bytes=10**9,
        timestamps=TimestampRules(),
        now_ms=NOW_MS,
    )


def open_log(directory: Path, recovery_point: int = 0, log_start_offset: int = 0) -> PartitionLog:
    directory.mkdir(exist_ok=True)
    return PartitionLog(
        directory,
        recovery_point=recovery_point,
        log_start_offset=log_start_offset,
        now_ms=NOW_MS,
        logger=LOGGER,
    )


def read_all(log: PartitionLog, start: int = 0) -> list[Record]:
    found: list[Record] = []
    offset = start
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20, True).records
        batches = decode_batches(data)
        assert batches, f"nothing read at {offset}"
        for batch in batches:
            found += [r for r in batch.records if r.offset >= offset]
        offset = batches[-1].records[-1].offset + 1
    return found


CONFIG = LogConfig()


def test_appends_get_dense_offsets_and_read_back_byte_for_byte(tmp_path: Path) -> None:
    log = open_log(tmp_path / "orders-0")
    sent: list[Any] = []
    for seed in range(20):
        batch = produced(seed % 7 + 1, seed=seed)
        result = log.append(batch, 3, CONFIG, NOW_MS)
        assert result.base_offset == sum(b.header.record_count for b in sent)
        assert result.last_offset == result.base_offset + batch.header.record_count - 1
        assert result.log_append_time_ms == -1
        sent.append(batch)
    # An append does not move the high watermark: the replica layer does (here: the leader
    # is the only in-sync replica).
    assert log.high_watermark == 0
    assert log.update_high_watermark(log.log_end_offset)
    assert log.log_end_offset == log.high_watermark == sum(b.header.record_count for b in sent)
    data = log.read(0, 1 << 20, True).records
    stored = decode_batches(data)
    assert len(stored) == len(sent)
    offset = 0
    for batch, copy in zip(sent, stored, strict=True):
        raw = data[sum(s.size for s in stored[: stored.index(copy)]) :][: copy.size]
        assert raw[16:] == batch.data[16:]  # everything but the base offset and epoch: as sent
        assert copy.base_offset == offset and copy.leader_epoch == 3
        offset += len(copy.records)
    assert [r.offset for r in read_all(log)] == list(range(offset))
    # Reading from the middle of a batch returns that whole batch.
    assert decode_batches(log.read(2, 1 << 20, True).records)[0].base_offset == 1


def test_reads_return_whole_batches_within_max_bytes_or_the_first_one_alone(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path / "t-0")
    for seed in range(3):
        log.append(produced(10, seed=seed), 0, CONFIG, NOW_MS)
    one = decode_batches(log.read(0, 1 << 20, True).records)[0].size
    assert len(log.read(0, one + 10, True).records) == one  # no partial second batch
    assert len(log.read(0, 10, True).records) == one  # KIP-74: the first batch whatever its size
    assert log.read(0, 10, False).records == b""
    assert log.read(30, 100, True).records == b""  # at the log end: nothing, no error
    for offset in (-1, 31):
        with pytest.raises(errors.RecordBatchError) as caught:
            log.read(offset, 100, True)
        assert caught.value.error_code == errors.OFFSET_OUT_OF_RANGE
        assert "[0, 30)" in str(caught.value)


def test_on_disk_layout_is_kafkas(tmp_path: Path) -> None:
    """File names, the .index (relative offset, position: big-endian int32 pairs every 4 KiB),
    the .timeindex (timestamp int64, relative offset int32) and leader-epoch-checkpoint."""
    log = open_log(tmp_path / "orders-0")
    for seed in range(40):
        log.append(produced(5, value_bytes=300, seed=seed), 2 if seed < 20 else 5, CONFIG, NOW_MS)
    log.flush()
    names = sorted(os.listdir(tmp_path / "orders-0"))
    assert names == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        "00000000000000000000.timeindex",
        "leader-epoch-checkpoint",
    ]
    data = (tmp_path / "orders-0" / "00000000000000000000.log").read_bytes()
    batches = decode_batches(data)
    starts = [sum(b.size for b in batches[:i]) for i in range(len(batches))]
    index = (tmp_path / "orders-0" / "00000000000000000000.index").read_bytes()
    assert index and len(index) % 8 == 0
    entries = list(struct.iter_unpack(">ii", index))
    since = 0
    expected = []
    for batch, start in zip(batches, starts, strict=True):
        if since > INDEX_INTERVAL_BYTES:
            expected.append((batch.records[-1].offset, start))
            since = 0
        since += batch.size
    assert entries == expected
    time_entries = list(
        struct.iter_unpack(
            ">qi", (tmp_path / "orders-0" / "00000000000000000000.timeindex").read_bytes()
        )
    )
    assert time_entries and all(a < b for a, b in itertools.pairwise(time_entries))
    for timestamp, relative in time_entries:
        batch = next(b for b in batches if b.records[-1].offset == relative)
        assert batch.max_timestamp == timestamp
    epochs = (tmp_path / "orders-0" / "leader-epoch-checkpoint").read_text()
    assert epochs == "0\n2\n2 0\n5 100\n"


def test_segments_roll_by_bytes_and_by_time(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    small = LogConfig(segment_bytes=1_500)
    for seed in range(10):
        log.append(produced(3, seed=seed), 0, small, NOW_MS)
    assert len(log.segments) > 2
    for before, after in itertools.pairwise(log.segments):
        assert after.base_offset == before.next_offset
        assert before.size <= 1_500
    assert [r.offset for r in read_all(log)] == list(range(30))
    names = sorted(n for n in os.listdir(tmp_path / "t-0") if n.endswith(".log"))
    assert names == [f"{s.base_offset:020d}.log" for s in log.segments]
    # segment.ms: by the batches' timestamps since the segment's first batch
    timed = open_log(tmp_path / "u-0")
    hourly = LogConfig(segment_ms=3_600_000)
    timed.append(produced(1, timestamp=NOW_MS), 0, hourly, NOW_MS)
    timed.append(produced(1, timestamp=NOW_MS + 3_600_000), 0, hourly, NOW_MS)
    assert len(timed.segments) == 1
    timed.append(produced(1, timestamp=NOW_MS + 3_600_001), 0, hourly, NOW_MS)
    assert [s.base_offset for s in timed.segments] == [0, 2]
    # A rolled segment is flushed: the recovery point moves to the new segment's base.
    assert timed.recovery_point == 2


def test_a_batch_larger_than_a_segment_is_record_list_too_large(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    with pytest.raises(errors.RecordBatchError) as caught:
        log.append(produced(20), 0, LogConfig(segment_bytes=500), NOW_MS)
    assert caught.value.error_code == 18  # RECORD_LIST_TOO_LARGE
    assert log.log_end_offset == 0


def test_log_append_time_topics_stamp_the_broker_time(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    config = LogConfig(timestamps=TimestampRules(log_append_time=True))
    result = log.append(produced(3, timestamp=NOW_MS - 10**9), 0, config, NOW_MS + 5)
    assert result.log_append_time_ms == NOW_MS + 5
    (batch,) = decode_batches(log.read(0, 1 << 20, True).records)
    assert batch.attributes & 0x08 and {r.timestamp for r in batch.records} == {NOW_MS + 5}


def test_retention_by_time_and_by_size_moves_the_log_start_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    config = LogConfig(segment_bytes=800)
    for seed in range(12):
        log.append(produced(2, timestamp=NOW_MS + seed * 1_000, seed=seed), 0, config, NOW_MS)
    segments = len(log.segments)
    # Nothing at or past the high watermark is deleted (the followers may not have it).
    everything = LogConfig(retention_ms=0)
    assert log.delete_old_segments(everything, NOW_MS + 10**6, lambda: None) == 0
    log.update_high_watermark(log.log_end_offset)
    persisted: list[int] = []
    # retention.ms: segments whose newest record is older than now - retention.ms
    by_time = LogConfig(segment_bytes=800, retention_ms=5_500)
    newest_second = log.segments[1].max_timestamp
    deleted = log.delete_old_segments(
        by_time, newest_second + 5_501, lambda: persisted.append(log.log_start_offset)
    )
    assert deleted == 2 and len(log.segments) == segments - 2
    assert log.log_start_offset == log.segments[0].base_offset == persisted[-1]
    with pytest.raises(errors.RecordBatchError):
        log.read(0, 100, True)
    # retention.bytes: oldest segments go while the log exceeds it by a whole segment
    by_size = LogConfig(segment_bytes=800, retention_bytes=log.segments[-1].size + 1)
    log.delete_old_segments(by_size, NOW_MS, lambda: persisted.append(log.log_start_offset))
    assert log.size_bytes() - log.segments[0].size < log.segments[-1].size + 1
    assert [r.offset for r in read_all(log, log.log_start_offset)] == list(
        range(log.log_start_offset, 24)
    )
    # Everything expired: the active segment is rolled and deleted too; the log is empty
    # at its end offset.
    log.delete_old_segments(
        LogConfig(retention_ms=0), NOW_MS + 10**6, lambda: persisted.append(log.log_start_offset)
    )
    assert log.log_start_offset == log.log_end_offset == 24
    assert log.read(24, 100, True).records == b""
    assert (tmp_path / "t-0" / "leader-epoch-checkpoint").read_text() == "0\n1\n0 24\n"


def test_reopening_after_a_clean_close_checks_nothing_and_keeps_everything(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    for seed in range(30):
        log.append(produced(4, seed=seed), 1, LogConfig(segment_bytes=4_000), NOW_MS)
    before = read_all(log)
    recovery_point = log.flush()
    log.close()
    again = open_log(tmp_path / "t-0", recovery_point=recovery_point)
    assert again.truncated_bytes == 0
    assert read_all(again) == before
    result = again.append(produced(1, seed=99), 1, CONFIG, NOW_MS)
    assert result.base_offset == 120


def torn_copies(tmp_path: Path) -> tuple[Path, list[Record], int, int]:
    """A log dir of three segments whose last batch was written last; (dir, records,
    size of the active segment before that batch, its size after)."""
    directory = tmp_path / "t-0"
    log = open_log(directory)
    config = LogConfig(segment_bytes=6_000)
    for seed in range(25):
        log.append(produced(3, seed=seed), 4, config, NOW_MS)
    before = log.segments[-1].size
    log.append(produced(5, seed=100), 6, config, NOW_MS)
    after = log.segments[-1].size
    records = read_all(log)
    log.close()
    return directory, records, before, after


def test_recovery_truncates_a_torn_tail_at_every_cut_of_the_last_batch(tmp_path: Path) -> None:
    """kill -9 mid-write: the active segment ends anywhere inside its last batch. Recovery
    keeps every earlier batch and cuts the rest; the log appends after it again."""
    directory, records, before, after = torn_copies(tmp_path)
    active = sorted(directory.glob("*.log"))[-1]
    whole = active.read_bytes()
    for cut in range(before, after + 1):
        active.write_bytes(whole[:cut])
        (directory / "leader-epoch-checkpoint").write_text("0\n2\n4 0\n6 75\n")
        log = open_log(directory, recovery_point=records[0].offset)
        kept = records if cut == after else records[:-5]
        assert log.truncated_bytes == cut - (after if cut == after else before)
        assert log.log_end_offset == len(kept)
        assert read_all(log) == kept
        assert active.stat().st_size == (after if cut == after else before)
        epochs = (directory / "leader-epoch-checkpoint").read_text()
        assert epochs == ("0\n2\n4 0\n6 75\n" if cut == after else "0\n1\n4 0\n")
        assert log.append(produced(1, seed=7), 7, CONFIG, NOW_MS).base_offset == len(kept)
        log.close()
        active.write_bytes(whole)


def test_recovery_of_a_corrupt_middle_segment_deletes_the_later_ones(tmp_path: Path) -> None:
    directory, records, _, _ = torn_copies(tmp_path)
    segments = sorted(directory.glob("*.log"))
    assert len(segments) == 3
    middle = bytearray(segments[1].read_bytes())
    middle[200] ^= 0xFF  # inside the first or second batch: its CRC fails
    segments[1].write_bytes(bytes(middle))
    log = open_log(directory, recovery_point=0)
    assert len(log.segments) == 2
    assert not segments[2].exists()
    kept = read_all(log)
    assert kept == records[: len(kept)] and len(kept) < len(records)


def test_index_files_damaged_below_the_recovery_point_are_rebuilt(tmp_path: Path) -> None:
    directory, records, _, _ = torn_copies(tmp_path)
    first_index = sorted(directory.glob("*.index"))[0]
    first_index.write_bytes(first_index.read_bytes()[:-3])  # not a whole number of entries
    log = open_log(directory, recovery_point=records[-1].offset + 1)
    assert read_all(log) == records
    assert len(first_index.read_bytes()) % 8 == 0


def test_leftovers_of_a_crash_are_removed(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory)
    log.append(produced(2), 0, CONFIG, NOW_MS)
    log.close()
    for name in ("leader-epoch-checkpoint.tmp", "00000000000000000099.index", "x.deleted"):
        (directory / name).write_bytes(b"junk")
    open_log(directory).close()
    assert sorted(os.listdir(directory)) == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        "00000000000000000000.timeindex",
        # the producer snapshot of the clean close (Kafka writes one too)
        "00000000000000000002.snapshot",
        "leader-epoch-checkpoint",
    ]


def test_list_offsets_lookups(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    config = LogConfig(segment_bytes=3_000)
    for seed in range(10):
        log.append(produced(3, timestamp=NOW_MS + seed * 100, seed=seed), seed // 5, config, NOW_MS)
    # timestamps: batch s holds NOW + 100 s, +1, +2 at offsets 3s, 3s+1, 3s+2
    found = log.offset_for_timestamp(NOW_MS + 401)
    assert found is not None and (found.offset, found.timestamp) == (13, NOW_MS + 401)
    found = log.offset_for_timestamp(NOW_MS + 403)
    assert found is not None and (found.offset, found.timestamp) == (15, NOW_MS + 500)
    assert log.offset_for_timestamp(NOW_MS + 10_000) is None
    found = log.max_timestamp()
    assert found is not None and (found.offset, found.timestamp) == (29, NOW_MS + 902)
    assert (log.earliest().offset, log.earliest().leader_epoch) == (0, 0)
    assert (log.latest().offset, log.latest().leader_epoch) == (30, 1)
    assert log.end_offset_for_epoch(0) == (0, 15)
    assert log.end_offset_for_epoch(1) == (1, 30)
    assert log.end_offset_for_epoch(2) == (-1, -1)


def failing_write(fail_after: int) -> Any:
    real = os.pwrite

    def pwrite(fd: int, data: Any, position: int) -> int:
        if len(data) > fail_after:
            real(fd, bytes(data)[:fail_after], position)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data, position)

    return pwrite


def test_a_failed_write_leaves_nothing_torn_and_the_log_serves_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(produced(3), 0, CONFIG, NOW_MS)
    size = log.segments[-1].size
    monkeypatch.setattr(os, "pwrite", failing_write(100))
    with pytest.raises(errors.LogStorageError, match="No space left"):
        log.append(produced(50, seed=1), 0, CONFIG, NOW_MS)
    monkeypatch.undo()
    assert (tmp_path / "t-0" / "00000000000000000000.log").stat().st_size == size
    assert log.log_end_offset == 3
    assert log.append(produced(2, seed=2), 0, CONFIG, NOW_MS).base_offset == 3
    assert [r.offset for r in read_all(log)] == [0, 1, 2, 3, 4]


def test_a_log_whose_undo_fails_is_failed_until_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(produced(3), 0, CONFIG, NOW_MS)
    monkeypatch.setattr(os, "pwrite", failing_write(100))

    def ftruncate(fd: int, length: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "ftruncate", ftruncate)
    with pytest.raises(errors.LogStorageError):
        log.append(produced(50, seed=1), 0, CONFIG, NOW_MS)
    monkeypatch.undo()
    assert log.failed is not None and "restarts" in log.failed
    with pytest.raises(errors.LogStorageError):
        log.read(0, 100, True)
    log.close()
    # A restart recovers: the torn bytes are cut, the three acknowledged records stay.
    again = open_log(tmp_path / "t-0")
    assert [r.offset for r in read_all(again)] == [0, 1, 2]
