"""The log cleaner (broker/log/cleaner.py) on real partition logs: generated logs against a
model (per key the last record wins, tombstones removed once their delete horizon passed,
offsets kept, every batch valid), idempotent producers' state across a clean, every cut point
of the swap followed by a reopen, and produce refusing records without a key."""

from __future__ import annotations

import dataclasses
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import structlog

from broker.log import errors
from broker.log.batch import TimestampRules, check_produced
from broker.log.cleaner import CleanerStop
from broker.log.config import LogConfig
from broker.log.partition_log import PartitionLog
from tests.record_batches import Record, decode_batches, encode_batch

NOW_MS = 1_700_000_000_000
LOGGER = structlog.get_logger("test")
DELETE_RETENTION_MS = 60_000
COMPACT = LogConfig(
    segment_bytes=2_000,
    compact=True,
    retention_ms=-1,
    delete_retention_ms=DELETE_RETENTION_MS,
    min_cleanable_dirty_ratio=0.0,
)
KeyValue = tuple[bytes | None, bytes | None]


def produced(
    records: list[KeyValue],
    timestamp: int = NOW_MS,
    *,
    producer_id: int = -1,
    base_sequence: int = -1,
    compression: int = 0,
) -> Any:
    batch = encode_batch(
        [Record(key, value, timestamp + i) for i, (key, value) in enumerate(records)],
        compression=compression,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=base_sequence,
    )
    return check_produced(
        batch,
        produce_version=9,
        max_message_bytes=10**9,
        timestamps=TimestampRules(),
        now_ms=NOW_MS,
    )


def open_log(directory: Path) -> PartitionLog:
    directory.mkdir(parents=True, exist_ok=True)
    return PartitionLog(
        directory, recovery_point=0, log_start_offset=0, now_ms=NOW_MS, logger=LOGGER
    )


def stored(
    log: PartitionLog, start: int | None = None
) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record of the log, read as a consumer reads (whole
    batches from each offset on, every CRC checked by ``decode_batches``), offsets strictly
    increasing."""
    found: list[tuple[int, bytes | None, bytes | None]] = []
    offset = log.log_start_offset if start is None else start
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20, True).records
        batches = decode_batches(data)
        assert batches, f"nothing read at {offset} (log end {log.log_end_offset})"
        read = [
            (r.offset, r.key, r.value) for b in batches for r in b.records if r.offset >= offset
        ]
        # As librdkafka needs (an answer without a record at or past the fetch offset is
        # "MSG_SIZE_TOO_LARGE" to it): the log's last record is never cleaned (the active
        # segment), so every read below the log end holds one.
        assert read, f"only batches without records at or past {offset}: {len(data)} bytes"
        found += read
        offset = max(offset + 1, _next_offset(data))
    offsets = [entry[0] for entry in found]
    assert offsets == sorted(set(offsets)), "offsets are not strictly increasing"
    return found


def _next_offset(data: bytes) -> int:
    end = 0
    at = 0
    while at + 61 <= len(data):
        base, length = (
            int.from_bytes(data[at : at + 8], "big", signed=True),
            int.from_bytes(data[at + 8 : at + 12], "big", signed=True),
        )
        delta = int.from_bytes(data[at + 23 : at + 27], "big", signed=True)
        end = base + delta + 1
        at += 12 + length
    return end


def generate(rng: random.Random, log: PartitionLog, batches: int, keys: int) -> None:
    for _ in range(batches):
        records: list[KeyValue] = []
        for _ in range(rng.randint(1, 6)):
            key = f"k{rng.randrange(keys)}".encode()
            value = None if rng.random() < 0.15 else rng.randbytes(rng.randint(0, 40))
            records.append((key, value))
        gzip = rng.random() < 0.3  # rewritten gzip batches are compressed again
        log.append(produced(records, compression=1 if gzip else 0), 0, COMPACT, NOW_MS)
    log.update_high_watermark(log.log_end_offset)


def model(
    before: list[tuple[int, bytes | None, bytes | None]],
    cleaned_below: int,
    drop_tombstones: bool,
) -> list[tuple[int, bytes | None, bytes | None]]:
    """What a clean of the records below ``cleaned_below`` keeps: per key its last record
    (a tombstone too, unless ``drop_tombstones``); the records from ``cleaned_below`` on as
    they are."""
    last: dict[bytes | None, int] = {}
    for offset, key, _ in before:
        if offset < cleaned_below:
            last[key] = offset
    kept = []
    for offset, key, value in before:
        if offset >= cleaned_below or (
            last[key] == offset and not (value is None and drop_tombstones)
        ):
            kept.append((offset, key, value))
    return kept


def test_cleaning_keeps_the_last_record_per_key_and_tombstones_until_their_horizon(
    tmp_path: Path,
) -> None:
    for seed in range(8):
        rng = random.Random(seed)
        try:
            directory = tmp_path / f"seed{seed}" / "t-0"
            log = open_log(directory)
            generate(rng, log, rng.randint(40, 120), rng.randint(3, 30))
            before = stored(log)
            size_before = log.size_bytes()
            cleaned_below = log.segments[-1].base_offset
            stats = log.clean(COMPACT, NOW_MS)
            assert stats is not None and stats.segments_read >= 1
            first = model(before, cleaned_below, drop_tombstones=False)
            assert stored(log) == first
            assert log.size_bytes() < size_before
            # Nothing more to clean: no dirty bytes, no horizon passed.
            assert log.clean(COMPACT, NOW_MS + 1) is None
            # More records, then a clean after the delete horizon: tombstones cleaned before
            # go, newer ones get their horizon.
            generate(rng, log, rng.randint(10, 60), rng.randint(3, 30))
            before = stored(log)
            later = NOW_MS + DELETE_RETENTION_MS
            cleaned_again = log.segments[-1].base_offset
            assert log.clean(COMPACT, later) is not None
            horizon_passed = {o for o, _, v in first if v is None and o < cleaned_below}
            expected = [
                entry
                for entry in model(before, cleaned_again, drop_tombstones=False)
                if entry[0] not in horizon_passed
            ]
            assert stored(log) == expected
            # Reopened (indexes, gaps and all): the same records.
            log.close()
            reopened = open_log(directory)
            assert stored(reopened) == expected
            assert reopened.log_end_offset == log.log_end_offset
            # A consumer starting at any offset reads from the first record at or after it.
            offsets = [entry[0] for entry in expected]
            for offset in rng.sample(range(reopened.log_end_offset), 20):
                first_after = [o for o in offsets if o >= offset][:1]
                assert [entry[0] for entry in stored(reopened, offset)][:1] == first_after
            # Long after: every tombstone cleaned before is gone.
            reopened.update_high_watermark(reopened.log_end_offset)
            assert reopened.clean(COMPACT, later + 10 * DELETE_RETENTION_MS) is not None
            assert all(v is not None for o, _, v in stored(reopened) if o < cleaned_again)
            reopened.close()
        except AssertionError:
            print(f"seed {seed}")
            raise


def test_dirty_ratio_high_watermark_and_compaction_lag_bound_what_is_cleaned(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path / "t-0")
    for i in range(60):
        log.append(produced([(b"same", str(i).encode() * 30)]), 0, COMPACT, NOW_MS)
    # Below the high watermark only: nothing is committed yet.
    assert log.clean(COMPACT, NOW_MS) is None
    hw = log.segments[2].base_offset
    log.update_high_watermark(hw)
    assert log.clean(COMPACT, NOW_MS) is not None
    assert [o for o, _, _ in stored(log) if o < hw] == [hw - 1]
    log.update_high_watermark(log.log_end_offset)
    # min.compaction.lag.ms: every record is younger than an hour, so nothing is cleanable.
    assert log.clean(dataclasses.replace(COMPACT, min_compaction_lag_ms=3_600_000), NOW_MS) is None
    assert log.clean(COMPACT, NOW_MS) is not None
    last = log.segments[-1].base_offset
    assert [o for o, _, _ in stored(log) if o < last] == [last - 1]
    # min.cleanable.dirty.ratio: more dirty bytes than 0.5 of the cleanable ones are needed.
    half = dataclasses.replace(COMPACT, min_cleanable_dirty_ratio=0.5)
    log.append(produced([(b"same", b"v" * 900)]), 0, COMPACT, NOW_MS)
    log.append(produced([(b"same", b"v" * 900)]), 0, COMPACT, NOW_MS)
    log.append(produced([(b"same", b"w")]), 0, COMPACT, NOW_MS)
    log.update_high_watermark(log.log_end_offset)
    assert log.clean(half, NOW_MS) is not None
    assert log.clean(half, NOW_MS) is None  # nothing dirty is left


def test_an_idempotent_producers_last_batch_survives_as_an_empty_batch(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory)
    sequence = 0
    for i in range(20):
        log.append(
            produced(
                [(b"a", b"x" * 80), (b"b", str(i).encode())], producer_id=7, base_sequence=sequence
            ),
            0,
            COMPACT,
            NOW_MS,
        )
        sequence += 2
    # Another producer overwrites both keys: every batch of producer 7 is superseded.
    for _ in range(30):
        log.append(produced([(b"a", b"y" * 80), (b"b", b"z")]), 0, COMPACT, NOW_MS)
    log.update_high_watermark(log.log_end_offset)
    before = log.active_producers()
    assert log.clean(COMPACT, NOW_MS) is not None
    last_of_7 = max(m.last_offset for m in log.producers.entry(7)[1])  # type: ignore[index]
    data = b"".join(log.read(s.base_offset, 1 << 20, True).records for s in log.segments if s.size)
    empty = [b for b in decode_batches(data) if not b.records]
    assert any(b.base_offset + 1 == last_of_7 for b in empty), "the last batch of 7 is gone"
    log.close()
    for snapshot in directory.glob("*.snapshot"):
        snapshot.unlink()  # the state must come back from the cleaned log alone
    reopened = open_log(directory)
    assert reopened.active_producers() == before
    # The producer's next sequence is accepted, a retry of its last batch is a duplicate.
    retry = produced([(b"a", b"x" * 80), (b"b", b"19")], producer_id=7, base_sequence=38)
    assert reopened.append(retry, 0, COMPACT, NOW_MS).last_offset == last_of_7
    next_batch = produced([(b"c", b"1")], producer_id=7, base_sequence=40)
    assert (
        reopened.append(next_batch, 0, COMPACT, NOW_MS).base_offset == reopened.log_end_offset - 1
    )
    reopened.close()


STEPS = [
    "cleaned files written",
    "one index renamed to .swap",
    "renamed to .swap",
    "first old segment deleted",
    "old segments deleted",
    "indexes renamed in",
    "swapped",
]
COMMITTED = STEPS.index("renamed to .swap")


def _build(directory: Path) -> PartitionLog:
    log = open_log(directory)
    generate(random.Random(99), log, 80, 12)
    return log


def _stop(step: str) -> Callable[[str], None]:
    def stop_at(reached: str) -> None:
        if reached == step:
            raise CleanerStop(step)

    return stop_at


@pytest.mark.parametrize("step", STEPS)
def test_a_crash_at_each_step_of_the_swap_reopens_as_before_or_after(
    tmp_path: Path, step: str
) -> None:
    reference = _build(tmp_path / "reference" / "t-0")
    before = stored(reference)
    reference.clean(COMPACT, NOW_MS)
    after = stored(reference)
    assert before != after
    directory = tmp_path / "crashed" / "t-0"
    log = _build(directory)
    with pytest.raises(CleanerStop):
        log.clean(COMPACT, NOW_MS, _stop(step))
    for segment in log.segments:  # the process dies: its descriptors go
        segment.close()
    reopened = open_log(directory)
    records = stored(reopened)
    if STEPS.index(step) >= COMMITTED:
        # Committed: the first group is swapped in (later groups were not cleaned yet).
        assert records != before
        assert set(records) <= set(before)
        first_group_end = _first_group_end(reference, directory)
        assert [r for r in records if r[0] < first_group_end] == [
            r for r in after if r[0] < first_group_end
        ]
    else:
        assert records == before
    leftovers = [n for n in os.listdir(directory) if n.endswith((".cleaned", ".swap"))]
    assert leftovers == []
    # The log cleans to the reference's result and keeps serving.
    reopened.update_high_watermark(reopened.log_end_offset)
    reopened.clean(COMPACT, NOW_MS)
    assert stored(reopened) == after
    reopened.close()


def _first_group_end(reference: PartitionLog, directory: Path) -> int:
    """The base offset of the second segment of the reopened log: where the first cleaned
    group (or the first old segment) ends."""
    bases = sorted(int(n[:20]) for n in os.listdir(directory) if n.endswith(".log"))
    return bases[1]


def test_produce_to_a_compacted_topic_refuses_records_without_a_key(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    with pytest.raises(errors.RecordBatchError) as caught:
        log.append(produced([(b"k", b"v"), (None, b"v")]), 0, COMPACT, NOW_MS)
    assert caught.value.error_code == errors.INVALID_RECORD
    assert "Compacted topic cannot accept message without key" in str(caught.value)
    assert log.log_end_offset == 0
    # A topic that only deletes takes them.
    assert log.append(produced([(None, b"v")]), 0, LogConfig(), NOW_MS).base_offset == 0
    log.close()


def test_a_follower_replicates_a_cleaned_log_with_its_gaps_and_cleans_its_own(
    tmp_path: Path,
) -> None:
    leader = open_log(tmp_path / "leader" / "t-0")
    generate(random.Random(7), leader, 80, 10)
    assert leader.clean(COMPACT, NOW_MS) is not None
    follower = open_log(tmp_path / "follower" / "t-0")
    while follower.log_end_offset < leader.log_end_offset:
        data = leader.read(follower.log_end_offset, 4096, True).records
        follower.append_as_follower(data, COMPACT, NOW_MS)
    follower.set_follower_high_watermark(leader.high_watermark)
    assert stored(follower) == stored(leader)
    # Its own clean, below its own active segment (its segments are not the leader's).
    cleaned_below = follower.segments[-1].base_offset
    follower.clean(COMPACT, NOW_MS)
    expected = model(stored(leader), cleaned_below, drop_tombstones=False)
    assert stored(follower) == expected
    follower.close()
    assert stored(open_log(tmp_path / "follower" / "t-0")) == expected


def test_a_log_closed_or_truncated_during_a_clean_is_left_as_it_is(tmp_path: Path) -> None:
    """The swap checks, under the lock, that the segments it replaces are still the log's."""
    closed = _build(tmp_path / "closed" / "t-0")
    before = stored(closed)

    def close_it(step: str) -> None:
        if step == "cleaned files written":
            closed.close()

    assert closed.clean(COMPACT, NOW_MS, close_it) is not None
    names = os.listdir(tmp_path / "closed" / "t-0")
    assert not [n for n in names if n.endswith((".cleaned", ".swap"))]
    assert stored(open_log(tmp_path / "closed" / "t-0")) == before
    # A follower's truncation replaced the segments: the clean drops its group.
    truncated = _build(tmp_path / "truncated" / "t-0")
    cut = truncated.segments[1].base_offset + 1

    def truncate_it(step: str) -> None:
        if step == "cleaned files written":
            truncated.truncate_to(cut)

    truncated.clean(COMPACT, NOW_MS, truncate_it)
    assert stored(truncated) == [r for r in before if r[0] < truncated.log_end_offset]
    truncated.close()


def test_a_damaged_sealed_segment_stops_the_clean_and_is_left_as_it_is(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = _build(directory)
    second = log.segments[1].path
    damaged = bytearray(second.read_bytes())
    damaged[8:12] = (5).to_bytes(4, "big")  # a batch length no magic-2 batch has
    second.write_bytes(bytes(damaged))
    with pytest.raises(errors.LogStorageError) as caught:
        log.clean(COMPACT, NOW_MS)
    assert second.name in str(caught.value)
    assert second.read_bytes() == bytes(damaged)
    assert not [n for n in os.listdir(directory) if n.endswith((".cleaned", ".swap"))]
    assert log.failed is None  # the log serves on; the cleaner tries again at its next run
    log.close()
    # A flipped bit in a record: never rewritten under a new CRC.
    flipped = _build(tmp_path / "flipped" / "t-0")
    first = flipped.segments[0].path
    data = bytearray(first.read_bytes())
    data[70] ^= 0x01
    first.write_bytes(bytes(data))
    with pytest.raises(errors.LogStorageError, match="CRC32C"):
        flipped.clean(COMPACT, NOW_MS)
    assert first.read_bytes() == bytes(data)
    flipped.close()
