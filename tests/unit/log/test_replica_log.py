"""What a follower and a replicated leader need of a partition log (broker/log/partition_log.py),
on real files: the high watermark kept apart from the log end offset (moved forward only,
checkpointed in replication-offset-checkpoint, clamped at open), reads bounded by it, a
follower's append of the leader's batches byte for byte (every bad batch refused with nothing
written, a partial tail ignored), truncation (at a batch boundary, inside a batch, to 0, past
the end, below the first segment), a truncation torn by a crash, the producer state after it,
and OffsetForLeaderEpoch's answers."""

from __future__ import annotations

import itertools
import os
import random
import shutil
import struct
from pathlib import Path
from typing import Any

import pytest
import structlog

from broker.log import errors
from broker.log.checkpoints import read_epoch_checkpoint
from broker.log.config import LogConfig
from broker.log.manager import LogManager
from broker.log.partition_log import PartitionLog
from broker.log.producer_state import snapshot_offsets
from quorum.ids import Uuid
from tests.record_batches import decode_batches
from tests.unit.log.test_log_manager import make_partition
from tests.unit.log.test_partition_log import (
    NOW_MS,
    failing_write,
    open_log,
    produced,
    read_all,
)
from tests.unit.log.test_producer_state import batch as producer_batch

LOGGER = structlog.get_logger("test")
SMALL = LogConfig(segment_bytes=3_000)
PID = 4_000
SEGMENT_FILES = (".log", ".index", ".timeindex")


def opened(directory: Path, recovery_point: int = 0, log_start_offset: int = 0) -> PartitionLog:
    directory.parent.mkdir(parents=True, exist_ok=True)
    return open_log(directory, recovery_point, log_start_offset)


def build_leader(
    directory: Path, config: LogConfig = SMALL, *, timestamp_step: int = 0
) -> PartitionLog:
    """A leader's log over several segments and epochs (1, 3, 5), plain batches of 1 to 5
    records (the n-th at ``n * timestamp_step`` after NOW_MS) and an idempotent producer's
    batches between them."""
    log = opened(directory)
    sequence = 0
    for step in range(36):
        epoch = 1 if step < 12 else 3 if step < 24 else 5
        if step % 4 == 3:
            log.append(producer_batch(sequence, 2, pid=PID), epoch, config, NOW_MS)
            sequence += 2
        else:
            timestamp = NOW_MS + step * timestamp_step
            log.append(
                produced(step % 5 + 1, seed=step, timestamp=timestamp), epoch, config, NOW_MS
            )
    return log


def stream(log: PartitionLog) -> tuple[bytes, dict[int, int]]:
    """Every batch of ``log`` back to back, as a follower fetches them, and the byte position
    of each batch's base offset (and of the log end offset) in them."""
    data = b""
    positions: dict[int, int] = {}
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        chunk = log.read(offset, 1 << 24, True).records
        for found in decode_batches(chunk):
            positions[found.base_offset] = len(data)
            data += chunk[: found.size]
            chunk = chunk[found.size :]
            offset = found.records[-1].offset + 1
    positions[offset] = len(data)
    return data, positions


def files(directory: Path, suffixes: tuple[str, ...] = SEGMENT_FILES) -> dict[str, bytes]:
    return {
        name: (directory / name).read_bytes()
        for name in sorted(os.listdir(directory))
        if name.endswith(suffixes)
    }


def data_files(directory: Path) -> dict[str, bytes]:
    """The non-empty ``.log`` and ``.index`` files (a truncation to a segment's base keeps
    that segment, emptied, as Kafka's does; a log that never went past it has none)."""
    return {name: data for name, data in files(directory, (".log", ".index")).items() if data}


def follow(directory: Path, data: bytes, config: LogConfig = SMALL) -> PartitionLog:
    follower = opened(directory)
    follower.append_as_follower(data, config, NOW_MS)
    return follower


# ----- the high watermark ------------------------------------------------------------------------


def test_the_high_watermark_moves_forward_only_and_never_past_the_log_end(tmp_path: Path) -> None:
    log = opened(tmp_path / "t-0")
    for seed in range(3):
        log.append(produced(4, seed=seed), 0, SMALL, NOW_MS)
    assert log.high_watermark == 0  # an append does not move it
    assert log.update_high_watermark(4) and log.high_watermark == 4
    assert not log.update_high_watermark(2) and log.high_watermark == 4
    assert log.update_high_watermark(100) and log.high_watermark == 12  # clamped to the end
    assert not log.update_high_watermark(12)
    follower = opened(tmp_path / "f-0")
    follower.append_as_follower(stream(log)[0], SMALL, NOW_MS)
    assert follower.set_follower_high_watermark(8) and follower.high_watermark == 8
    assert not follower.set_follower_high_watermark(5)  # an older answer never lowers it
    assert follower.set_follower_high_watermark(50) and follower.high_watermark == 12


def test_reads_bounded_by_max_offset_return_only_whole_batches_below_it(tmp_path: Path) -> None:
    log = opened(tmp_path / "t-0")
    for seed in range(4):
        log.append(produced(5, seed=seed), 0, SMALL, NOW_MS)  # batches [0,5) [5,10) ...
    log.update_high_watermark(10)
    everything = log.read(0, 1 << 20, True)
    assert everything.high_watermark == 10 and everything.log_end_offset == 20
    assert [b.base_offset for b in decode_batches(everything.records)] == [0, 5, 10, 15]
    bounded = log.read(0, 1 << 20, True, max_offset=log.high_watermark)
    assert [b.base_offset for b in decode_batches(bounded.records)] == [0, 5]
    assert bounded.records == everything.records[: len(bounded.records)]
    # A bound inside a batch leaves that batch out (and the offset of its middle reads nothing).
    assert [
        b.base_offset for b in decode_batches(log.read(0, 1 << 20, True, max_offset=12).records)
    ] == [0, 5]
    assert log.read(11, 1 << 20, True, max_offset=12).records == b""
    # Between the bound and the log end: no data, no error; past the log end: out of range.
    for offset in (10, 15, 20):
        assert log.read(offset, 1 << 20, True, max_offset=10).records == b""
    with pytest.raises(errors.RecordBatchError) as caught:
        log.read(21, 1 << 20, True, max_offset=10)
    assert caught.value.error_code == errors.OFFSET_OUT_OF_RANGE
    # KIP-74 still holds within the bound: the first batch whatever max_bytes says.
    assert len(decode_batches(log.read(0, 1, True, max_offset=10).records)) == 1
    assert log.read(0, 1 << 20, True, max_offset=0).records == b""


def test_the_high_watermark_is_checkpointed_and_clamped_to_the_log_at_open(
    tmp_path: Path,
) -> None:
    topic = Uuid.random()
    make_partition(tmp_path, "t-0", topic)
    logs = LogManager([tmp_path], LOGGER, clock=lambda: NOW_MS)
    log = logs.get(topic, "t", 0)
    for seed in range(4):
        log.append(produced(3, seed=seed), 0, SMALL, NOW_MS)
    log.update_high_watermark(9)
    logs.close()
    assert (tmp_path / "replication-offset-checkpoint").read_text() == "0\n1\nt 0 9\n"
    again = LogManager([tmp_path], LOGGER, clock=lambda: NOW_MS)
    log = again.get(topic, "t", 0)
    assert (log.log_end_offset, log.high_watermark) == (12, 9)
    log.update_high_watermark(12)
    again.write_checkpoints()
    # kill -9 with the last batch torn: the checkpointed high watermark (12) is past the
    # recovered log end (9), so it starts at the log end.
    del again
    active = sorted((tmp_path / "t-0").glob("*.log"))[-1]
    active.write_bytes(active.read_bytes()[:-7])
    reopened = LogManager([tmp_path], LOGGER, clock=lambda: NOW_MS).get(topic, "t", 0)
    assert reopened.truncated_bytes > 0
    assert (reopened.log_end_offset, reopened.high_watermark) == (9, 9)


def test_without_a_checkpoint_the_high_watermark_starts_at_the_log_start(tmp_path: Path) -> None:
    log = opened(tmp_path / "t-0", log_start_offset=0)
    for seed in range(3):
        log.append(produced(2, seed=seed), 0, SMALL, NOW_MS)
    log.close()
    again = opened(tmp_path / "t-0", recovery_point=6)
    assert (again.high_watermark, again.log_end_offset) == (0, 6)
    assert (
        PartitionLog(
            tmp_path / "t-0",
            recovery_point=6,
            log_start_offset=2,
            now_ms=NOW_MS,
            logger=LOGGER,
            high_watermark=1,
        ).high_watermark
        == 2
    )


# ----- a follower's append ----------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_follower_fetching_in_any_chunks_holds_the_leaders_files_byte_for_byte(
    tmp_path: Path, seed: int
) -> None:
    """The follower fetches the leader's batches in chunks of random sizes (each possibly
    ending inside a batch: that partial tail is ignored and fetched whole next time)."""
    leader = build_leader(tmp_path / "leader" / "t-0")
    data, positions = stream(leader)
    follower = opened(tmp_path / "follower" / "t-0")
    rng = random.Random(seed)
    position = 0
    while position < len(data):
        chunk = data[position : position + rng.randint(1, 6_000)]
        end = follower.append_as_follower(chunk, SMALL, NOW_MS)
        assert end == follower.log_end_offset, f"seed {seed}"
        position = positions[end]
    assert follower.log_end_offset == leader.log_end_offset, f"seed {seed}"
    assert len(leader.segments) > 3
    leader_files = files(leader.directory, (*SEGMENT_FILES, "leader-epoch-checkpoint"))
    assert files(follower.directory, (*SEGMENT_FILES, "leader-epoch-checkpoint")) == leader_files
    assert follower.epochs.entries == leader.epochs.entries == [(1, 0), (3, 30), (5, 63)]
    assert follower.producers.entry(PID) == leader.producers.entry(PID), f"seed {seed}"
    assert follower.high_watermark == 0  # the follower's append does not move it
    # Once leader, the follower deduplicates a retry of the producer's last batch.
    assert leader.producers.entry(PID) is not None
    last = leader.producers.entry(PID)[1][-1]  # type: ignore[index]
    retry = follower.append(producer_batch(last.first_seq, 2, pid=PID), 7, SMALL, NOW_MS)
    assert (retry.base_offset, retry.last_offset) == (last.first_offset, last.last_offset)
    assert follower.log_end_offset == leader.log_end_offset


def test_a_follower_rolls_by_time_and_index_as_the_leader_did(tmp_path: Path) -> None:
    """segment.ms measured on the batches' timestamps: one fetch of everything rolls where the
    leader rolled, batch by batch."""
    config = LogConfig(segment_ms=45)
    leader = build_leader(tmp_path / "leader" / "t-0", config, timestamp_step=10)
    assert len(leader.segments) > 3
    data, _ = stream(leader)
    follower = follow(tmp_path / "follower" / "t-0", data, config)
    assert [s.base_offset for s in follower.segments] == [s.base_offset for s in leader.segments]
    assert files(follower.directory) == files(leader.directory)


@pytest.mark.parametrize("config", [LogConfig(), SMALL], ids=["one_segment", "many_segments"])
def test_a_follower_append_is_one_write_per_segment(
    tmp_path: Path, monkeypatch: Any, config: LogConfig
) -> None:
    leader = build_leader(tmp_path / "leader" / "t-0", config)
    data, _ = stream(leader)
    follower = opened(tmp_path / "follower" / "t-0")
    writes: list[int] = []
    real = os.pwrite

    def counting(fd: int, buffer: Any, position: int) -> int:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".log"):
            writes.append(len(buffer))
        return real(fd, buffer, position)

    monkeypatch.setattr(os, "pwrite", counting)
    follower.append_as_follower(data, config, NOW_MS)
    assert writes == [segment.size for segment in leader.segments]
    assert sum(writes) == len(data)


def refuse(log: PartitionLog, data: bytes, code: int) -> str:
    before = files(log.directory, (*SEGMENT_FILES, "leader-epoch-checkpoint"))
    end = log.log_end_offset
    with pytest.raises(errors.RecordBatchError) as caught:
        log.append_as_follower(data, SMALL, NOW_MS)
    assert caught.value.error_code == code, str(caught.value)
    assert log.log_end_offset == end
    assert files(log.directory, (*SEGMENT_FILES, "leader-epoch-checkpoint")) == before
    return str(caught.value)


def test_bad_batches_are_refused_and_nothing_of_the_fetch_is_written(tmp_path: Path) -> None:
    leader = build_leader(tmp_path / "leader" / "t-0")
    data, positions = stream(leader)
    offsets = sorted(positions)
    follower = follow(tmp_path / "follower" / "t-0", data[: positions[offsets[2]]])
    at = follower.log_end_offset
    start, second, third = positions[at], positions[offsets[3]], positions[offsets[4]]
    # A bad CRC in the second batch of the fetch: the first is not written either.
    damaged = bytearray(data[start:third])
    damaged[second - start + 70] ^= 0x01
    assert "CRC32C" in refuse(follower, bytes(damaged), errors.CORRUPT_MESSAGE)
    # Magic 1, a batch length below a v2 header's, a negative last offset delta.
    for field_at, value in ((16, b"\x01"), (8, struct.pack(">i", 20)), (23, b"\xff\xff\xff\xff")):
        bad = bytearray(data[start:third])
        bad[field_at : field_at + len(value)] = value
        refuse(follower, bytes(bad), errors.CORRUPT_MESSAGE)
    # Below the log end: a batch below it, a batch overlapping the one before. (A gap above
    # it is allowed: a compacted leader's log has gaps; test_log_cleaner.py.)
    message = refuse(follower, data[positions[offsets[1]] : third], errors.UNKNOWN_SERVER_ERROR)
    assert str(offsets[1]) in message and str(at) in message
    overlap = data[start:second] + data[start:second]
    message = refuse(follower, overlap, errors.UNKNOWN_SERVER_ERROR)
    assert str(offsets[2]) in message and str(offsets[3]) in message
    # Larger than a segment of the topic.
    with pytest.raises(errors.RecordBatchError) as caught:
        follower.append_as_follower(data[start:third], LogConfig(segment_bytes=100), NOW_MS)
    assert caught.value.error_code == errors.RECORD_LIST_TOO_LARGE
    # The good bytes still append.
    assert follower.append_as_follower(data[start:third], SMALL, NOW_MS) == offsets[4]


def test_a_follower_write_that_fails_is_undone_with_its_epochs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    leader = build_leader(tmp_path / "leader" / "t-0", LogConfig())
    data, positions = stream(leader)
    first_epoch_3 = leader.epochs.entries[1][1]
    follower = follow(tmp_path / "follower" / "t-0", data[: positions[first_epoch_3]], LogConfig())
    before = files(follower.directory, (*SEGMENT_FILES, "leader-epoch-checkpoint"))
    monkeypatch.setattr(os, "pwrite", failing_write(100))
    with pytest.raises(errors.LogStorageError, match="No space left"):
        follower.append_as_follower(data[positions[first_epoch_3] :], LogConfig(), NOW_MS)
    monkeypatch.undo()
    assert follower.log_end_offset == first_epoch_3
    assert follower.epochs.entries == [(1, 0)]
    assert files(follower.directory, (*SEGMENT_FILES, "leader-epoch-checkpoint")) == before
    ref = follow(tmp_path / "ref" / "t-0", data[: positions[first_epoch_3]], LogConfig())
    assert follower.producers.entry(PID) == ref.producers.entry(PID)
    end = follower.append_as_follower(data[positions[first_epoch_3] :], LogConfig(), NOW_MS)
    assert end == leader.log_end_offset
    assert files(follower.directory, SEGMENT_FILES) == files(leader.directory, SEGMENT_FILES)


def test_a_partial_batch_at_the_end_of_a_fetch_is_ignored(tmp_path: Path) -> None:
    leader = build_leader(tmp_path / "leader" / "t-0")
    data, positions = stream(leader)
    offsets = sorted(positions)
    follower = opened(tmp_path / "follower" / "t-0")
    first, second = positions[offsets[1]], positions[offsets[2]]
    for cut in (first, first + 1, first + 11, first + 12, first + 60, second - 1):
        assert follower.append_as_follower(data[:cut], SMALL, NOW_MS) == offsets[1]
        follower.truncate_to(0)
    assert follower.append_as_follower(b"", SMALL, NOW_MS) == 0
    assert follower.append_as_follower(data[:5], SMALL, NOW_MS) == 0
    assert follower.append_as_follower(data[:second], SMALL, NOW_MS) == offsets[2]


# ----- truncation ---------------------------------------------------------------------------------


def reference(tmp_path: Path, data: bytes, positions: dict[int, int], end: int) -> PartitionLog:
    """A follower that only ever fetched the batches below ``end``."""
    return follow(tmp_path / "reference" / "t-0", data[: positions[end]])


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("boundary", "same"),  # the base offset of a batch in a middle segment
        ("inside", "batch_base"),  # the middle of a batch: the batch goes whole
        ("segment_base", "same"),  # exactly a segment's base: it is emptied, kept active
        ("zero", "same"),
    ],
)
def test_truncation_leaves_what_a_follower_of_the_kept_batches_would_hold(
    tmp_path: Path, where: str, expected: str
) -> None:
    leader = build_leader(tmp_path / "leader" / "t-0")
    data, positions = stream(leader)
    follower = follow(tmp_path / "follower" / "t-0", data)
    follower.set_follower_high_watermark(follower.log_end_offset)
    bases = sorted(positions)[:-1]
    segment_bases = [s.base_offset for s in follower.segments]
    middle = [b for b in bases if segment_bases[1] < b < segment_bases[2]]
    offset = {
        "boundary": middle[1],
        "inside": next(
            b + 2 for b, n in itertools.pairwise(bases) if n - b >= 4 and b > segment_bases[1]
        ),
        "segment_base": segment_bases[2],
        "zero": 0,
    }[where]
    new_end = offset if expected == "same" else max(b for b in bases if b <= offset)
    assert new_end in positions
    follower.truncate_to(offset)
    assert follower.log_end_offset == new_end
    assert follower.high_watermark == new_end and follower.recovery_point <= new_end
    ref = reference(tmp_path, data, positions, new_end)
    assert data_files(follower.directory) == data_files(ref.directory)
    assert read_all(follower) == read_all(ref)
    assert follower.epochs.entries == ref.epochs.entries
    assert all(start < new_end for _, start in follower.epochs.entries)
    epoch_file = follower.directory / "leader-epoch-checkpoint"
    assert read_epoch_checkpoint(epoch_file) == ref.epochs.entries
    assert follower.producers.entry(PID) == ref.producers.entry(PID)
    assert all(o <= new_end for o in snapshot_offsets(follower.directory))
    for target in (NOW_MS, NOW_MS + 3, NOW_MS + 10**6):
        assert follower.offset_for_timestamp(target) == ref.offset_for_timestamp(target)
    # It appends again from there, as a follower and as a leader.
    assert follower.append_as_follower(data[positions[new_end] :], SMALL, NOW_MS) == (
        leader.log_end_offset
    )
    assert data_files(follower.directory) == data_files(leader.directory)
    follower.truncate_to(new_end)
    assert follower.append(produced(3, seed=77), 9, SMALL, NOW_MS).base_offset == new_end
    assert follower.epochs.latest_epoch == 9
    # And reopening (kill -9: no close, checkpoints of before the truncation) recovers the same.
    end, entries = follower.log_end_offset, follower.epochs.entries
    records = read_all(follower)
    del follower
    again = PartitionLog(
        tmp_path / "follower" / "t-0",
        recovery_point=leader.log_end_offset,
        log_start_offset=0,
        now_ms=NOW_MS,
        logger=LOGGER,
        high_watermark=leader.log_end_offset,
    )
    assert (again.log_end_offset, again.high_watermark) == (end, end)
    assert again.epochs.entries == entries and read_all(again) == records


def test_truncating_at_or_past_the_log_end_changes_nothing(tmp_path: Path) -> None:
    leader = build_leader(tmp_path / "leader" / "t-0")
    data, _ = stream(leader)
    follower = follow(tmp_path / "follower" / "t-0", data)
    before = files(follower.directory, (*SEGMENT_FILES, "leader-epoch-checkpoint"))
    for offset in (follower.log_end_offset, follower.log_end_offset + 10):
        follower.truncate_to(offset)
        assert follower.log_end_offset == leader.log_end_offset
        assert files(follower.directory, (*SEGMENT_FILES, "leader-epoch-checkpoint")) == before


def test_producer_state_after_truncation_deduplicates_only_batches_still_in_the_log(
    tmp_path: Path,
) -> None:
    log = opened(tmp_path / "t-0")
    offsets = []
    for sequence in range(0, 12, 2):
        result = log.append(producer_batch(sequence, 2, pid=PID), 2, SMALL, NOW_MS)
        offsets.append((result.base_offset, result.last_offset))
    log.truncate_to(offsets[4][0])  # the last two batches (sequences 8 and 10) go
    assert log.log_end_offset == 8
    # A retry of a kept batch: deduplicated, answered with its offsets.
    retry = log.append(producer_batch(6, 2, pid=PID), 2, SMALL, NOW_MS)
    assert (retry.base_offset, retry.last_offset) == offsets[3]
    # The batch of sequence 8 is no longer in the log: appended again, at the new end.
    again = log.append(producer_batch(8, 2, pid=PID), 2, SMALL, NOW_MS)
    assert (again.base_offset, log.log_end_offset) == (8, 10)
    # Sequence 10 is the next one, not a duplicate of the removed batch.
    with pytest.raises(errors.RecordBatchError) as caught:
        log.append(producer_batch(12, 2, pid=PID), 2, SMALL, NOW_MS)
    assert caught.value.error_code == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER


def test_producer_state_is_rebuilt_from_a_snapshot_below_the_cut(tmp_path: Path) -> None:
    """Rolls wrote snapshots; the one past the cut goes and the state is the snapshot below
    plus the batches after it, as opening builds it."""
    log = opened(tmp_path / "t-0")
    config = LogConfig(segment_bytes=700)
    offsets = []
    for sequence in range(0, 40, 2):
        result = log.append(producer_batch(sequence, 2, pid=PID), 2, config, NOW_MS)
        offsets.append(result.base_offset)
    snapshots = snapshot_offsets(log.directory)
    assert len(snapshots) >= 3
    cut = offsets[13]
    log.truncate_to(cut)
    assert snapshot_offsets(log.directory) == [o for o in snapshots if o <= cut]
    expected = opened(tmp_path / "ref-0")
    for sequence in range(0, 26, 2):
        expected.append(producer_batch(sequence, 2, pid=PID), 2, config, NOW_MS)
    assert log.producers.entry(PID) == expected.producers.entry(PID)


def copy_dir(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


def test_a_truncation_torn_by_a_crash_opens_consistent(tmp_path: Path) -> None:
    """A crash at each step of a truncation (simulated by putting back files as they were
    before that step): opening with the checkpoints of before the truncation gives a log
    whose epochs never start past its end, and whose producer state matches its batches."""
    leader = build_leader(tmp_path / "leader" / "t-0")
    data, positions = stream(leader)
    before = follow(tmp_path / "before" / "t-0", data)
    before.close()
    after = PartitionLog(
        copy_dir(before.directory, tmp_path / "after" / "t-0"),
        recovery_point=leader.log_end_offset,
        log_start_offset=0,
        now_ms=NOW_MS,
        logger=LOGGER,
    )
    cut = sorted(positions)[10]
    after.truncate_to(cut)
    after.close()
    old, new = before.directory, after.directory
    crashes = {
        # The epoch checkpoint not yet written: it names epochs past the new end.
        "epochs_not_written": [("leader-epoch-checkpoint", old)],
        # Later segments deleted, the holding segment not cut yet, no epoch checkpoint.
        "segment_not_cut": [
            *[(n, old) for n in files(old) if n in files(new)],
            ("leader-epoch-checkpoint", old),
        ],
        # Only the snapshots past the cut are gone.
        "only_snapshots_gone": [(n, old) for n in files(old, (*SEGMENT_FILES, "checkpoint"))],
    }
    for name, restored in crashes.items():
        crashed = copy_dir(new, tmp_path / name / "t-0")
        for file_name, source in restored:
            shutil.copyfile(source / file_name, crashed / file_name)
        log = PartitionLog(
            crashed,
            recovery_point=leader.log_end_offset,
            log_start_offset=0,
            now_ms=NOW_MS,
            logger=LOGGER,
            high_watermark=leader.log_end_offset,
        )
        end = log.log_end_offset
        assert end in positions, name
        assert end == cut or name != "epochs_not_written", name
        assert all(start < end for _, start in log.epochs.entries), name
        assert log.high_watermark == end
        ref = follow(tmp_path / f"ref-{name}" / "t-0", data[: positions[end]])
        assert log.epochs.entries == ref.epochs.entries, name
        assert log.producers.entry(PID) == ref.producers.entry(PID), name
        assert read_all(log) == read_all(ref), name


def test_truncating_fully_starts_an_empty_log_at_the_offset(tmp_path: Path) -> None:
    leader = build_leader(tmp_path / "leader" / "t-0")
    data, positions = stream(leader)
    follower = follow(tmp_path / "follower" / "t-0", data[: positions[sorted(positions)[8]]])
    follower.set_follower_high_watermark(5)
    follower.truncate_fully_and_start_at(60)
    assert (follower.log_start_offset, follower.log_end_offset) == (60, 60)
    assert (follower.high_watermark, follower.recovery_point) == (60, 60)
    assert follower.epochs.entries == [] and follower.producers.entry(PID) is None
    assert sorted(os.listdir(follower.directory)) == [
        "00000000000000000060.index",
        "00000000000000000060.log",
        "00000000000000000060.timeindex",
        "leader-epoch-checkpoint",
    ]
    assert (follower.directory / "leader-epoch-checkpoint").read_text() == "0\n0\n"
    at = min(b for b in positions if b >= 60)
    # Fetching from the leader's batch at 60 on (or a batch boundary past it).
    follower.truncate_fully_and_start_at(at)
    assert follower.append_as_follower(data[positions[at] :], SMALL, NOW_MS) == (
        leader.log_end_offset
    )
    holding = leader.epochs.epoch_for(at)
    later = [(epoch, start) for epoch, start in leader.epochs.entries if start > at]
    assert follower.epochs.entries == [(holding, at), *later]
    follower.close()
    again = opened(follower.directory, recovery_point=leader.log_end_offset)
    assert (again.log_start_offset, again.log_end_offset) == (at, leader.log_end_offset)
    # truncate_to below the first segment does the same.
    again.truncate_to(at - 3)
    assert (again.log_start_offset, again.log_end_offset) == (at - 3, at - 3)


def test_a_truncation_through_the_manager_writes_the_checkpoints(tmp_path: Path) -> None:
    topic = Uuid.random()
    make_partition(tmp_path, "t-0", topic)
    logs = LogManager([tmp_path], LOGGER, clock=lambda: NOW_MS)
    log = logs.get(topic, "t", 0)
    for seed in range(6):
        log.append(produced(3, seed=seed), 0, SMALL, NOW_MS)
    log.update_high_watermark(18)
    log.flush()
    logs.write_checkpoints()
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text() == "0\n1\nt 0 18\n"
    log.truncate_to(7)  # inside the batch [6, 9): it goes whole
    assert log.log_end_offset == 6
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text() == "0\n1\nt 0 6\n"
    assert (tmp_path / "replication-offset-checkpoint").read_text() == "0\n1\nt 0 6\n"
    logs.close()


# ----- OffsetForLeaderEpoch --------------------------------------------------------------------


def test_end_offset_for_epoch_answers_a_followers_truncation_question(tmp_path: Path) -> None:
    """Kafka's ``endOffsetFor``: an epoch's end is the start of the next higher epoch (the log
    end for the latest); an epoch between two known ones is answered with the lower one; one
    past the latest, or none, is (-1, -1); one below the first known is answered with the
    first known epoch's start (Kafka's answer: the data before it is gone)."""
    log = opened(tmp_path / "t-0")
    for epoch, count in ((2, 10), (4, 10), (6, 10)):
        log.append(produced(count, seed=epoch), epoch, SMALL, NOW_MS)
    assert log.epochs.entries == [(2, 0), (4, 10), (6, 20)]
    answers = {epoch: log.end_offset_for_epoch(epoch) for epoch in range(-1, 9)}
    assert answers == {
        -1: (-1, -1),
        0: (0, 0),
        1: (1, 0),
        2: (2, 10),
        3: (2, 10),
        4: (4, 20),
        5: (4, 20),
        6: (6, 30),
        7: (-1, -1),
        8: (-1, -1),
    }
    # A follower whose log diverged after epoch 4 truncates to the leader's end of epoch 4.
    follower = opened(tmp_path / "f-0")
    follower.append_as_follower(stream(log)[0][: stream(log)[1][20]], SMALL, NOW_MS)
    follower.append(produced(5, seed=9), 5, SMALL, NOW_MS)  # epoch 5 never reached the leader
    epoch, end = log.end_offset_for_epoch(follower.latest_epoch())
    assert (epoch, end) == (4, 20)
    follower.truncate_to(end)
    assert follower.end_offset_for_epoch(5) == (-1, -1)
    assert follower.end_offset_for_epoch(4) == (4, 20) == (follower.latest_epoch(), 20)


def test_a_log_start_checkpointed_past_a_truncated_end_opens_at_the_end(tmp_path: Path) -> None:
    """Retention moved the log start to 12; a truncation to 6 lowered it with the end, and the
    broker died before the checkpoint of the lowered one: the log opens empty at its end."""
    log = opened(tmp_path / "t-0")
    for seed in range(6):
        log.append(produced(3, seed=seed), 0, LogConfig(segment_bytes=500), NOW_MS)
    log.update_high_watermark(12)
    assert log.delete_old_segments(LogConfig(retention_ms=0), NOW_MS + 10**6, lambda: None)
    start = log.log_start_offset
    assert 6 < start <= 12
    log.truncate_to(6)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (6, 6, 6)
    del log
    again = opened(tmp_path / "t-0", recovery_point=18, log_start_offset=start)
    assert (again.log_start_offset, again.log_end_offset, again.high_watermark) == (6, 6, 6)
    assert again.read(6, 100, True).records == b""
