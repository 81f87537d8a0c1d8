"""Idempotent producers' state in a partition log (broker/log/producer_state.py) on real files:
every refusal with Kafka's code, the dedup of each of the last 5 batches (answered with the
original offsets, never appended twice), epoch bumps and fencing, sequence wrap-around, and
restarts: a clean close (snapshot at the log end), a kill -9 (no close: the roll's snapshot plus
the active segment's headers), a torn snapshot, a snapshot past a cut tail, and Kafka's snapshot
format."""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

import crc32c
import pytest

from broker.log import errors
from broker.log.batch import TimestampRules, check_produced
from broker.log.config import LogConfig
from broker.log.producer_state import (
    INVALID_PRODUCER_EPOCH,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    SEQUENCE_MAX,
    ProducerState,
    snapshot_offsets,
)
from tests.record_batches import Record, decode_batches, encode_batch
from tests.unit.log.test_partition_log import CONFIG, NOW_MS, open_log

PID = 4_000


def batch(seq: int, count: int = 2, *, pid: int = PID, epoch: int = 0, tag: str = "") -> Any:
    records = [
        Record(f"{pid}-{epoch}-{seq + i}{tag}".encode(), b"v" * 50, NOW_MS, ())
        for i in range(count)
    ]
    data = encode_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    return check_produced(
        data,
        produce_version=11,
        max_message_bytes=1 << 20,
        timestamps=TimestampRules(),
        now_ms=NOW_MS,
    )


def append(log: Any, produced: Any, config: LogConfig = CONFIG) -> tuple[int, int]:
    result = log.append(produced, 0, config, NOW_MS)
    return result.base_offset, result.last_offset


def refused(log: Any, produced: Any) -> errors.RecordBatchError:
    end = log.log_end_offset
    with pytest.raises(errors.RecordBatchError) as caught:
        log.append(produced, 0, CONFIG, NOW_MS)
    assert log.log_end_offset == end, "a refused batch must not be appended"
    return caught.value


def keys(log: Any) -> list[bytes]:
    """Every record's key, read segment by segment (a read stays in one segment)."""
    found: list[bytes] = []
    while len(found) < log.log_end_offset:
        data = log.read(len(found), 1 << 24, True).records
        found += [r.key for b in decode_batches(data) for r in b.records]
    return found


def test_in_order_batches_append_and_each_of_the_last_five_is_deduplicated(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path / "t-0")
    offsets = [append(log, batch(seq)) for seq in range(0, 14, 2)]  # 7 batches, 14 records
    assert offsets == [(i, i + 1) for i in range(0, 14, 2)]
    for index in range(2, 7):  # the last 5: answered with their own offsets, not appended
        assert append(log, batch(index * 2)) == offsets[index]
    assert log.log_end_offset == 14
    assert len(keys(log)) == len(set(keys(log))) == 14
    # The 6th newest is no longer retained: a retry of it is out of order, not a duplicate.
    error = refused(log, batch(2))
    assert error.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER and "must start at 14" in str(error)
    log.close()


def test_a_duplicate_must_match_the_whole_sequence_range(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    append(log, batch(0, 3))
    error = refused(log, batch(0, 2))  # same first sequence, other last sequence
    assert error.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER


@pytest.mark.parametrize(
    ("follow", "code", "words"),
    [
        (lambda: batch(5), OUT_OF_ORDER_SEQUENCE_NUMBER, "must start at 2"),  # a gap
        (lambda: batch(1), OUT_OF_ORDER_SEQUENCE_NUMBER, "must start at 2"),  # overlap
        (lambda: batch(2, epoch=1), OUT_OF_ORDER_SEQUENCE_NUMBER, "starts at sequence 0"),
        (lambda: batch(3, pid=PID + 1), errors.UNKNOWN_PRODUCER_ID, "InitProducerId"),
    ],
    ids=["gap", "overlap", "new-epoch-not-at-0", "unknown-producer"],
)
def test_refusals_carry_kafkas_codes(tmp_path: Path, follow: Any, code: int, words: str) -> None:
    log = open_log(tmp_path / "t-0")
    append(log, batch(0))
    error = refused(log, follow())
    assert error.error_code == code and words in str(error), str(error)


def test_epoch_bump_resets_sequences_and_fences_the_old_epoch(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    append(log, batch(0, epoch=3))
    append(log, batch(2, epoch=3))
    assert append(log, batch(0, epoch=4)) == (4, 5)
    error = refused(log, batch(4, epoch=3))
    assert error.error_code == INVALID_PRODUCER_EPOCH and "fenced" in str(error)
    # The old epoch's batches are no longer duplicates either: fenced.
    assert refused(log, batch(0, epoch=3)).error_code == INVALID_PRODUCER_EPOCH
    assert append(log, batch(2, epoch=4)) == (6, 7)


def test_sequences_wrap_from_int32_max_to_zero() -> None:
    state = ProducerState()
    first = batch(SEQUENCE_MAX - 1, 2).header._replace(base_offset=0)
    state.update(first)
    assert state.check(batch(0, 1).header) is None  # next after 2^31-1 is 0
    wrapped = batch(SEQUENCE_MAX, 3).header._replace(base_offset=2)  # SEQUENCE_MAX, 0, 1
    state2 = ProducerState()
    state2.update(wrapped)
    entry = state2.entry(PID)
    assert entry is not None and entry[1][0].last_seq == 1
    assert state2.check(batch(2, 1).header) is None


def test_new_producers_start_at_zero_with_any_epoch(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    assert append(log, batch(0, pid=9, epoch=7)) == (0, 1)
    assert append(log, batch(0, pid=10)) == (2, 3)
    assert log.producers.entry(9) is not None and log.producers.entry(9)[0] == 7  # type: ignore[index]


def test_plain_batches_are_untouched_by_producer_state(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    plain = check_produced(
        encode_batch([Record(b"k", b"v", NOW_MS, ())]),
        produce_version=11,
        max_message_bytes=1 << 20,
        timestamps=TimestampRules(),
        now_ms=NOW_MS,
    )
    assert append(log, plain) == (0, 0)
    assert append(log, plain) == (1, 1)
    assert len(log.producers) == 0


# ----- restarts -----------------------------------------------------------------------------


def fill(log: Any, batches: int, config: LogConfig = CONFIG) -> list[tuple[int, int]]:
    return [append(log, batch(seq * 2), config) for seq in range(batches)]


def test_state_survives_a_clean_close_through_the_snapshot(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory)
    offsets = fill(log, 6)
    log.close()
    assert snapshot_offsets(directory) == [12]
    again = open_log(directory, recovery_point=12)
    for index in range(1, 6):
        assert append(again, batch(index * 2)) == offsets[index]
    assert append(again, batch(12)) == (12, 13)
    again.close()


def test_state_survives_kill_9_from_the_roll_snapshot_and_the_active_segment(
    tmp_path: Path,
) -> None:
    """No close: the last snapshot is the roll's, and the 5 retained batches straddle it;
    every one of them is still answered with its original offsets after the restart."""
    directory = tmp_path / "t-0"
    config = LogConfig(segment_bytes=700)  # about 3 batches a segment
    log = open_log(directory)
    offsets = fill(log, 11, config)
    assert len(log.segments) > 2
    rolls = snapshot_offsets(directory)
    assert rolls and rolls[-1] < 22  # a roll snapshot, before the log end
    del log  # kill -9: no close, no snapshot at the end
    again = open_log(directory, recovery_point=rolls[-1])
    for index in range(6, 11):
        assert append(again, batch(index * 2), config) == offsets[index]
    assert append(again, batch(22), config) == (22, 23)
    assert len(keys(again)) == len(set(keys(again))) == 24


def test_without_any_snapshot_the_whole_log_is_replayed(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory)
    offsets = fill(log, 5)
    log.close()
    for offset in snapshot_offsets(directory):
        os.unlink(directory / f"{offset:020d}.snapshot")
    again = open_log(directory, recovery_point=10)
    assert append(again, batch(4)) == offsets[2]
    assert append(again, batch(10)) == (10, 11)


def test_a_torn_snapshot_is_skipped_and_the_log_replayed(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory)
    offsets = fill(log, 3)
    log.close()
    path = directory / f"{6:020d}.snapshot"
    path.write_bytes(path.read_bytes()[:-5])
    again = open_log(directory, recovery_point=6)
    assert append(again, batch(2)) == offsets[1]


def test_a_snapshot_past_the_log_end_is_deleted(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory)
    fill(log, 3)
    log.close()
    (directory / f"{50:020d}.snapshot").write_bytes(ProducerState().encode_snapshot())
    open_log(directory, recovery_point=6).close()
    assert 50 not in snapshot_offsets(directory)


def test_the_snapshot_is_kafkas_format_with_the_newest_batch_last() -> None:
    state = ProducerState()
    for seq, offset in ((0, 0), (2, 2)):
        state.update(batch(seq).header._replace(base_offset=offset))
    data = state.encode_snapshot()
    version, crc, count = struct.unpack_from(">hIi", data)
    assert (version, count) == (1, 2) and crc == crc32c.crc32c(data[6:])
    # Kafka's reader keeps the last entry of a producer id: its newest batch.
    last = struct.unpack_from(">qhiqiqiq", data, 10 + 46)
    assert last == (PID, 0, 3, 3, 1, NOW_MS, -1, -1)
    loaded = ProducerState.decode_snapshot(data)
    assert loaded.entry(PID) == state.entry(PID)
    with pytest.raises(Exception, match="CRC32C"):
        ProducerState.decode_snapshot(data[:6] + bytes([data[6] ^ 1]) + data[7:])


def test_the_producers_kept_are_bounded_least_recent_first() -> None:
    state = ProducerState(entries_max=3)
    for pid in (1, 2, 3):
        state.update(batch(0, pid=pid).header._replace(base_offset=pid * 10))
    state.update(batch(2, pid=1).header._replace(base_offset=40))  # 1 is now the most recent
    state.update(batch(0, pid=4).header._replace(base_offset=50))  # 2 is forgotten
    assert [pid for pid in (1, 2, 3, 4) if state.entry(pid) is not None] == [1, 3, 4]
    with pytest.raises(errors.RecordBatchError) as caught:
        state.check(batch(2, pid=2).header)
    assert caught.value.error_code == errors.UNKNOWN_PRODUCER_ID
    # The order survives a snapshot: the next one forgotten is still the least recent (3).
    loaded = ProducerState.decode_snapshot(state.encode_snapshot(), entries_max=3)
    loaded.update(batch(0, pid=5).header._replace(base_offset=60))
    assert [pid for pid in (1, 3, 4, 5) if loaded.entry(pid) is not None] == [1, 4, 5]


def test_negative_producer_ids_are_no_producer(tmp_path: Path) -> None:
    """Kafka's hasProducerId: any negative id means none, so such batches are not tracked."""
    log = open_log(tmp_path / "t-0")
    odd = batch(0, pid=-5)
    assert append(log, odd) == (0, 1)
    assert append(log, odd) == (2, 3)
    assert len(log.producers) == 0


def test_the_whole_log_is_replayed_across_sealed_segments(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    config = LogConfig(segment_bytes=700)
    log = open_log(directory)
    offsets = fill(log, 9, config)
    log.close()
    for offset in snapshot_offsets(directory):
        os.unlink(directory / f"{offset:020d}.snapshot")
    again = open_log(directory, recovery_point=18)
    assert len(again.segments) > 2
    for index in range(4, 9):
        assert append(again, batch(index * 2), config) == offsets[index]


def test_silent_producers_expire_when_retention_runs(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    append(log, batch(0))
    day = 86_400_000
    log.delete_old_segments(CONFIG, NOW_MS + day - 1, lambda: None)
    assert log.producers.entry(PID) is not None
    log.delete_old_segments(CONFIG, NOW_MS + day, lambda: None)
    assert log.producers.entry(PID) is None
    assert refused(log, batch(2)).error_code == errors.UNKNOWN_PRODUCER_ID


def test_replay_walks_batches_larger_than_one_read(tmp_path: Path) -> None:
    """Headers are read in 16 KiB chunks: batches larger than a chunk, between small ones and
    plain ones, are all found again."""
    directory = tmp_path / "t-0"
    log = open_log(directory)
    plain = check_produced(
        encode_batch([Record(b"k", b"v" * 30_000, NOW_MS, ())]),
        produce_version=11,
        max_message_bytes=1 << 20,
        timestamps=TimestampRules(),
        now_ms=NOW_MS,
    )
    offsets = []
    for seq in range(0, 60, 10):
        append(log, plain)
        big = encode_batch(
            [Record(f"{seq + i}".encode(), b"x" * 2_000, NOW_MS, ()) for i in range(10)],
            producer_id=PID,
            producer_epoch=0,
            base_sequence=seq,
        )
        produced = check_produced(
            big,
            produce_version=11,
            max_message_bytes=1 << 20,
            timestamps=TimestampRules(),
            now_ms=NOW_MS,
        )
        assert len(produced.data) > 16 * 1024
        offsets.append((seq, produced, append(log, produced)))
    end = log.log_end_offset
    del log  # kill -9
    for offset in snapshot_offsets(directory):
        os.unlink(directory / f"{offset:020d}.snapshot")
    again = open_log(directory, recovery_point=end)
    for _, produced, first in offsets[1:]:
        assert append(again, produced) == first
    assert again.log_end_offset == end


def test_retention_keeps_only_the_newest_snapshot_below_the_log_start(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    config = LogConfig(segment_bytes=700, retention_bytes=1_500)
    log = open_log(directory)
    offsets = fill(log, 15, config)
    rolls = snapshot_offsets(directory)
    assert len(rolls) >= 4
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_old_segments(config, NOW_MS, lambda: None) > 0
    start = log.log_start_offset
    kept = snapshot_offsets(directory)
    assert [o for o in kept if o < start] == [max(o for o in rolls if o < start)]
    assert [o for o in kept if o >= start] == [o for o in rolls if o >= start]
    end = log.log_end_offset
    del log  # kill -9: the kept snapshots and the headers from the log start rebuild the state
    again = open_log(directory, recovery_point=end, log_start_offset=start)
    for index in range(10, 15):
        assert append(again, batch(index * 2), config) == offsets[index]
