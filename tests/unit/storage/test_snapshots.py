"""Snapshot files (quorum.storage.snapshots), log cleaning (SegmentedLog.delete_before and
truncate_fully_and_start_at, with crash recovery), retention plans, and ``log dump`` of
``.checkpoint`` files. Real files in ``tmp_path``."""

from __future__ import annotations

import io
import json
import os
import random
from pathlib import Path

import pytest

from quorum.errors import ErrorCode
from quorum.metadata.batch import LogBatch, decode_log_batch, encode_batch
from quorum.metadata.image import MetadataImage
from quorum.metadata.records import (
    ConfigRecord,
    ConfigResourceType,
    NoOpRecord,
    SnapshotFooter,
    SnapshotHeader,
    record_kafka_type,
)
from quorum.metadata.snapshot_records import image_to_records, snapshot_batches
from quorum.raft.messages import SnapshotId
from quorum.storage import fsutil
from quorum.storage.errors import CorruptLogError, StorageInvariantError
from quorum.storage.frames import encode_frame
from quorum.storage.log import (
    LOG_START_OFFSET_FILE,
    SegmentedLog,
    SegmentInfo,
    read_log_start_offset,
    segment_file_name,
)
from quorum.storage.snapshots import (
    CorruptSnapshotError,
    PositionOutOfRangeError,
    SnapshotDownload,
    SnapshotExistsError,
    SnapshotInfo,
    SnapshotNotFoundError,
    SnapshotWriter,
    delete_snapshots_before,
    describe_snapshot,
    iter_snapshot_file,
    list_snapshots,
    load_snapshot_image,
    newest_valid_snapshot,
    parse_snapshot_file_name,
    plan_retention,
    read_chunk,
    read_snapshot,
    remove_partial_snapshots,
    snapshot_file_name,
    snapshot_path,
    snapshot_size,
    validate_snapshot,
    write_snapshot,
)
from quorum.tools.log_dump import dump_log
from tests.unit.metadata.test_snapshot_records import rich_image
from tests.unit.storage.test_storage_log import fixed_batches, make_batches, write_log

# ----- helpers ----------------------------------------------------------------------------


def write_image(
    directory: Path, image: MetadataImage, *, epoch: int = 3, per_batch: int = 4
) -> SnapshotId:
    return write_snapshot(
        directory,
        image.offset + 1,
        epoch,
        image_to_records(image),
        1_700_000_000_000,
        records_per_batch_max=per_batch,
    )


def frame_positions(path: Path, snapshot_id: SnapshotId) -> list[int]:
    return [position for position, _, _ in iter_snapshot_file(path, snapshot_id, decode=False)]


def write_frames(path: Path, batches: list[LogBatch]) -> None:
    path.write_bytes(b"".join(encode_frame(batch) for batch in batches))


def batches_of(*records: object, epoch: int = 3) -> list[LogBatch]:
    return list(
        snapshot_batches(list(records), epoch=epoch, last_contained_log_timestamp_ms=5)  # type: ignore[arg-type]
    )


BROKER_CONFIG = ConfigRecord(ConfigResourceType.BROKER, "", "a", "b")


# ----- names and listing ------------------------------------------------------------------


def test_file_names_are_kafkas() -> None:
    snapshot_id = SnapshotId(end_offset=4711, epoch=3)
    name = snapshot_file_name(snapshot_id)
    assert name == "00000000000000004711-0000000003.checkpoint"
    assert parse_snapshot_file_name(name) == snapshot_id
    for other in (
        "00000000000000004711-0000000003.checkpoint.part",
        "4711-3.checkpoint",
        "00000000000000004711.log",
        "00000000000000004711-9999999999.checkpoint",  # epoch past i32
    ):
        assert parse_snapshot_file_name(other) is None
    with pytest.raises(StorageInvariantError):
        snapshot_file_name(SnapshotId(-1, 0))


def test_list_snapshots_is_sorted_and_ignores_other_files(tmp_path: Path) -> None:
    ids = [SnapshotId(10, 2), SnapshotId(5, 1), SnapshotId(10, 1), SnapshotId(100, 4)]
    for snapshot_id in ids:
        write_snapshot(tmp_path, snapshot_id.end_offset, snapshot_id.epoch, [], 0)
    (tmp_path / "00000000000000000200-0000000005.checkpoint.part").write_bytes(b"x")
    (tmp_path / segment_file_name(0)).write_bytes(b"")
    (tmp_path / "quorum-state").write_bytes(b"{}")
    assert list_snapshots(tmp_path) == sorted(ids)
    assert list_snapshots(tmp_path / "missing") == []


# ----- writing and reading ----------------------------------------------------------------


def test_write_then_load_gives_the_same_image(tmp_path: Path) -> None:
    image = rich_image()
    snapshot_id = write_image(tmp_path, image)
    assert snapshot_id == SnapshotId(image.offset + 1, 3)
    assert load_snapshot_image(tmp_path, snapshot_id) == image
    batches = list(read_snapshot(tmp_path, snapshot_id))
    assert batches[0].records == (SnapshotHeader(0, 1_700_000_000_000),)
    assert batches[-1].records == (SnapshotFooter(0),)
    assert all(b.record_count <= 4 for b in batches)
    info = validate_snapshot(snapshot_path(tmp_path, snapshot_id))
    assert info == SnapshotInfo(
        snapshot_id,
        snapshot_path(tmp_path, snapshot_id),
        snapshot_size(tmp_path, snapshot_id),
        1_700_000_000_000,
    )
    assert describe_snapshot(tmp_path, snapshot_id) == info
    assert not list(tmp_path.glob("*.part"))


def test_an_empty_image_is_a_header_and_a_footer(tmp_path: Path) -> None:
    snapshot_id = write_snapshot(tmp_path, 0, 0, [], 0)
    assert [b.records for b in read_snapshot(tmp_path, snapshot_id)] == [
        (SnapshotHeader(0, 0),),
        (SnapshotFooter(0),),
    ]
    assert load_snapshot_image(tmp_path, snapshot_id) == MetadataImage.EMPTY


def test_snapshots_are_never_overwritten(tmp_path: Path) -> None:
    write_snapshot(tmp_path, 7, 1, [BROKER_CONFIG], 0)
    before = (tmp_path / snapshot_file_name(SnapshotId(7, 1))).read_bytes()
    with pytest.raises(SnapshotExistsError):
        write_snapshot(tmp_path, 7, 1, [], 0)
    assert (tmp_path / snapshot_file_name(SnapshotId(7, 1))).read_bytes() == before


def test_a_writer_that_fails_or_aborts_leaves_nothing(tmp_path: Path) -> None:
    def records() -> object:
        yield BROKER_CONFIG
        raise RuntimeError("the image went away")

    with pytest.raises(RuntimeError):
        write_snapshot(tmp_path, 9, 1, records(), 0)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []
    with SnapshotWriter(tmp_path, SnapshotId(9, 1), last_contained_log_timestamp_ms=0) as writer:
        writer.append([BROKER_CONFIG])
        assert (tmp_path / (snapshot_file_name(SnapshotId(9, 1)) + ".part")).exists()
    assert list(tmp_path.iterdir()) == []  # left without freeze: aborted
    with pytest.raises(StorageInvariantError):
        writer.append([BROKER_CONFIG])


def test_the_writer_streams_in_bounded_buffers(tmp_path: Path) -> None:
    writer = SnapshotWriter(tmp_path, SnapshotId(50_000, 2), last_contained_log_timestamp_ms=1)
    records = [
        ConfigRecord(ConfigResourceType.BROKER, str(i), "k", "v" * 100) for i in range(30_000)
    ]
    writer.append(records[:10])
    writer.append(records[10:])
    part = tmp_path / (snapshot_file_name(SnapshotId(50_000, 2)) + ".part")
    assert 0 < part.stat().st_size <= writer.size_bytes  # written as it goes, not at the end
    snapshot_id = writer.freeze()
    decoded = list(read_snapshot(tmp_path, snapshot_id))
    assert [r for b in decoded[1:-1] for r in b.records] == records
    assert max(b.record_count for b in decoded) == 10_000


def test_leftover_parts_are_removed_on_open(tmp_path: Path) -> None:
    part = tmp_path / "00000000000000000009-0000000001.checkpoint.part"
    part.write_bytes(b"half a snapshot")
    unrelated = tmp_path / "00000000000000000000.log"
    unrelated.write_bytes(b"")
    assert remove_partial_snapshots(tmp_path) == [part]
    assert not part.exists()
    assert unrelated.exists()
    assert remove_partial_snapshots(tmp_path) == []


# ----- corruption -------------------------------------------------------------------------


def test_every_bit_flip_and_every_cut_is_a_corrupt_snapshot_error(tmp_path: Path) -> None:
    """A snapshot has no torn tail: it got its name only once whole. Flip one bit anywhere, or
    cut it anywhere: reading and validating must both raise, naming the file."""
    source = tmp_path / "source"
    source.mkdir()
    snapshot_id = write_image(source, rich_image())
    original = snapshot_path(source, snapshot_id).read_bytes()
    rng = random.Random(7)
    damaged_dir = tmp_path / "damaged"
    damaged_dir.mkdir()
    damaged = snapshot_path(damaged_dir, snapshot_id)
    cuts = sorted(
        set(rng.sample(range(len(original)), 60))
        | set(frame_positions(snapshot_path(source, snapshot_id), snapshot_id))
    )
    flips = rng.sample(range(len(original) * 8), 150)
    variants: list[bytes] = [original[:cut] for cut in cuts]
    for bit in flips:
        content = bytearray(original)
        content[bit // 8] ^= 1 << (bit % 8)
        variants.append(bytes(content))
    variants.append(original + b"\x00")
    variants.append(original + original[: len(original) // 2])
    for variant in variants:
        damaged.write_bytes(variant)
        with pytest.raises(CorruptSnapshotError) as caught:
            list(read_snapshot(damaged_dir, snapshot_id))
        assert caught.value.path == damaged
        assert caught.value.byte_offset is None or 0 <= caught.value.byte_offset <= len(variant)
        with pytest.raises(CorruptSnapshotError):
            validate_snapshot(damaged)


@pytest.mark.parametrize(
    ("batches", "message"),
    [
        ([], "the file is empty"),
        (batches_of()[:1], "ends after its SnapshotHeader"),
        (batches_of(BROKER_CONFIG)[:2], "ends without a SnapshotFooter"),
        (
            [
                encode_batch(base_offset=0, epoch=3, timestamp_ms=0, records=[BROKER_CONFIG]),
                batches_of()[-1],
            ],
            "the first batch must be a control batch",
        ),
        (batches_of(BROKER_CONFIG)[1:], "position 1 where 0"),
        (batches_of(BROKER_CONFIG, epoch=4), "a batch of epoch 4 in a snapshot of epoch 3"),
        (
            [
                *batches_of(BROKER_CONFIG),
                encode_batch(
                    base_offset=3,
                    epoch=3,
                    timestamp_ms=0,
                    records=[SnapshotFooter(0)],
                    control=True,
                ),
            ],
            "a control batch",
        ),
        ([*batches_of(BROKER_CONFIG), batches_of()[-1]], "position 1 where 3"),
        (
            [batches_of()[0], LogBatch(2, 3, 1, batches_of()[1].data)],
            "position 2 where 1",
        ),
        (
            [
                batches_of()[0],
                encode_batch(
                    base_offset=1,
                    epoch=3,
                    timestamp_ms=0,
                    records=[SnapshotHeader(0, 1)],
                    control=True,
                ),
                encode_batch(
                    base_offset=2,
                    epoch=3,
                    timestamp_ms=0,
                    records=[SnapshotFooter(0)],
                    control=True,
                ),
            ],
            "a control batch",
        ),
        (
            [
                encode_batch(
                    base_offset=0,
                    epoch=3,
                    timestamp_ms=0,
                    records=[SnapshotHeader(7, 1)],
                    control=True,
                ),
                batches_of()[-1],
            ],
            "SnapshotHeader version 7",
        ),
        ([batches_of()[0], LogBatch(1, 3, 1, b"\xc1")], "does not decode"),
    ],
)
def test_structural_damage_is_named(tmp_path: Path, batches: list[LogBatch], message: str) -> None:
    snapshot_id = SnapshotId(10, 3)
    path = snapshot_path(tmp_path, snapshot_id)
    write_frames(path, batches)
    with pytest.raises(CorruptSnapshotError, match=message):
        list(read_snapshot(tmp_path, snapshot_id))


def test_a_renamed_snapshot_is_caught_by_its_epoch(tmp_path: Path) -> None:
    snapshot_id = write_image(tmp_path, rich_image(), epoch=3)
    renamed = SnapshotId(snapshot_id.end_offset, 5)
    snapshot_path(tmp_path, snapshot_id).rename(snapshot_path(tmp_path, renamed))
    with pytest.raises(CorruptSnapshotError, match="epoch 3 in a snapshot of epoch 5"):
        validate_snapshot(snapshot_path(tmp_path, renamed))


def test_newest_valid_snapshot_skips_and_reports_a_corrupt_newest(tmp_path: Path) -> None:
    assert newest_valid_snapshot(tmp_path) is None
    image = rich_image()
    older = write_snapshot(tmp_path, 5, 1, [BROKER_CONFIG], 0)
    newest = write_image(tmp_path, image)
    found = newest_valid_snapshot(tmp_path)
    assert found is not None
    assert (found.snapshot_id, found.skipped) == (newest, ())
    path = snapshot_path(tmp_path, newest)
    content = bytearray(path.read_bytes())
    content[len(content) // 2] ^= 0x10
    path.write_bytes(bytes(content))
    found = newest_valid_snapshot(tmp_path)
    assert found is not None
    assert found.snapshot_id == older
    (skipped,) = found.skipped
    assert skipped.path == path
    assert skipped.byte_offset is not None
    snapshot_path(tmp_path, older).write_bytes(b"")
    assert newest_valid_snapshot(tmp_path) is None


def test_delete_snapshots_before_keeps_the_given_one(tmp_path: Path) -> None:
    ids = [write_snapshot(tmp_path, end, 1, [], 0) for end in (5, 10, 15)]
    with pytest.raises(SnapshotNotFoundError, match="at least one snapshot must remain"):
        delete_snapshots_before(tmp_path, SnapshotId(20, 1))
    assert delete_snapshots_before(tmp_path, ids[1]) == [ids[0]]
    assert list_snapshots(tmp_path) == ids[1:]
    assert delete_snapshots_before(tmp_path, ids[1]) == []


# ----- FetchSnapshot chunks and downloads -------------------------------------------------


def test_chunks_reassemble_the_file_and_positions_are_checked(tmp_path: Path) -> None:
    snapshot_id = write_image(tmp_path, rich_image())
    size = snapshot_size(tmp_path, snapshot_id)
    whole = snapshot_path(tmp_path, snapshot_id).read_bytes()
    assert size == len(whole)
    chunks = []
    position = 0
    while position < size:
        chunk = read_chunk(tmp_path, snapshot_id, position, 100)
        assert 1 <= len(chunk) <= 100
        chunks.append(chunk)
        position += len(chunk)
    assert b"".join(chunks) == whole
    for bad in (-1, size, size + 10):
        with pytest.raises(PositionOutOfRangeError) as caught:
            read_chunk(tmp_path, snapshot_id, bad, 100)
        assert caught.value.error_code == ErrorCode.POSITION_OUT_OF_RANGE
    missing = SnapshotId(snapshot_id.end_offset + 1, 3)
    with pytest.raises(SnapshotNotFoundError) as not_found:
        read_chunk(tmp_path, missing, 0, 100)
    assert not_found.value.error_code == ErrorCode.SNAPSHOT_NOT_FOUND
    with pytest.raises(SnapshotNotFoundError):
        snapshot_size(tmp_path, missing)


def download(leader: Path, follower: Path, snapshot_id: SnapshotId, chunk_bytes: int) -> SnapshotId:
    size = snapshot_size(leader, snapshot_id)
    with SnapshotDownload(follower, snapshot_id, size_bytes=size) as receiving:
        while not receiving.is_complete:
            data = read_chunk(leader, snapshot_id, receiving.position, chunk_bytes)
            receiving.append(receiving.position, data)
        return receiving.complete()


def test_a_download_installs_an_identical_snapshot(tmp_path: Path) -> None:
    leader, follower = tmp_path / "leader", tmp_path / "follower"
    leader.mkdir()
    follower.mkdir()
    image = rich_image()
    snapshot_id = write_image(leader, image)
    assert download(leader, follower, snapshot_id, 97) == snapshot_id
    assert (
        snapshot_path(follower, snapshot_id).read_bytes()
        == snapshot_path(leader, snapshot_id).read_bytes()
    )
    assert load_snapshot_image(follower, snapshot_id) == image
    assert list_snapshots(follower) == [snapshot_id]
    with pytest.raises(SnapshotExistsError):
        SnapshotDownload(follower, snapshot_id)


def test_a_bad_download_is_refused_and_removed(tmp_path: Path) -> None:
    leader, follower = tmp_path / "leader", tmp_path / "follower"
    leader.mkdir()
    follower.mkdir()
    snapshot_id = write_image(leader, rich_image())
    whole = snapshot_path(leader, snapshot_id).read_bytes()
    # A flipped bit in transit.
    receiving = SnapshotDownload(follower, snapshot_id)
    damaged = bytearray(whole)
    damaged[40] ^= 1
    receiving.append(0, bytes(damaged))
    with pytest.raises(CorruptSnapshotError):
        receiving.complete()
    assert list(follower.iterdir()) == []
    # Chunks out of order are the driver's bug.
    receiving = SnapshotDownload(follower, snapshot_id, size_bytes=len(whole))
    receiving.append(0, whole[:10])
    with pytest.raises(StorageInvariantError, match="chunks must follow each other"):
        receiving.append(20, whole[20:30])
    with pytest.raises(CorruptSnapshotError, match="past the snapshot's size"):
        receiving.append(10, whole[10:] + b"x")
    receiving.abort()
    # Too short, or named with another epoch than its batches carry.
    with SnapshotDownload(follower, snapshot_id, size_bytes=len(whole)) as receiving:
        receiving.append(0, whole[:-1])
        with pytest.raises(CorruptSnapshotError, match="ended at"):
            receiving.complete()
    other = SnapshotId(snapshot_id.end_offset, snapshot_id.epoch + 1)
    with SnapshotDownload(follower, other) as receiving:
        receiving.append(0, whole)
        with pytest.raises(CorruptSnapshotError, match="epoch"):
            receiving.complete()
    assert list(follower.iterdir()) == []


# ----- retention --------------------------------------------------------------------------


def snap(end: int, size: int, timestamp_ms: int) -> SnapshotInfo:
    return SnapshotInfo(SnapshotId(end, 1), Path(f"{end}"), size, timestamp_ms)


def segs(*bounds: tuple[int, int, int]) -> list[SegmentInfo]:
    return [SegmentInfo(base, end, Path(f"{base}.log"), size, size) for base, end, size in bounds]


SEGMENTS = segs((0, 100, 1000), (100, 200, 1000), (200, 300, 1000))


def test_retention_by_bytes_deletes_oldest_snapshots_and_the_log_before_the_next() -> None:
    snapshots = [snap(100, 500, 0), snap(200, 500, 0), snap(250, 500, 0)]
    # 3000 log + 1500 snapshots = 4500 > 4000: the oldest goes, with segment [0, 100).
    plan = plan_retention(snapshots, SEGMENTS, retention_bytes=4000, retention_ms=-1, now_ms=0)
    assert plan.delete_snapshots == (SnapshotId(100, 1),)
    assert plan.keep_from == SnapshotId(200, 1)
    assert plan.log_start_offset == 200
    # Everything over budget: still the newest snapshot and the log after it stay.
    plan = plan_retention(snapshots, SEGMENTS, retention_bytes=1, retention_ms=-1, now_ms=0)
    assert plan.delete_snapshots == (SnapshotId(100, 1), SnapshotId(200, 1))
    assert plan.log_start_offset == 250
    # Within budget, or the rule disabled: nothing.
    for retention_bytes in (10_000, 0, -1):
        plan = plan_retention(
            snapshots, SEGMENTS, retention_bytes=retention_bytes, retention_ms=-1, now_ms=0
        )
        assert plan.is_empty
        assert plan.keep_from is None


def test_retention_by_time_stops_at_the_first_young_snapshot() -> None:
    snapshots = [snap(100, 1, 1_000), snap(150, 1, 5_000), snap(200, 1, 2_000), snap(250, 1, 9_000)]
    plan = plan_retention(snapshots, SEGMENTS, retention_bytes=-1, retention_ms=3_000, now_ms=7_000)
    # 100 is 6 s old: goes. 150 is 2 s old: kept, and the walk stops there (200 stays too).
    assert plan.delete_snapshots == (SnapshotId(100, 1),)
    assert plan.log_start_offset == 150
    plan = plan_retention(snapshots, SEGMENTS, retention_bytes=-1, retention_ms=0, now_ms=10_000)
    assert plan.delete_snapshots == tuple(s.snapshot_id for s in snapshots[:-1])
    assert plan.log_start_offset == 250
    assert plan_retention(
        snapshots[-1:], SEGMENTS, retention_bytes=1, retention_ms=0, now_ms=10**9
    ).is_empty
    assert plan_retention([], SEGMENTS, retention_bytes=1, retention_ms=0, now_ms=10**9).is_empty


def test_retention_never_cleans_the_log_past_its_end() -> None:
    plan = plan_retention(
        [snap(100, 1, 0), snap(400, 1, 0)], SEGMENTS, retention_bytes=-1, retention_ms=0, now_ms=1
    )
    assert plan.delete_snapshots == (SnapshotId(100, 1),)
    assert plan.log_start_offset == 300


# ----- log cleaning -----------------------------------------------------------------------


OPTIONS = {"segment_bytes_max": 300}


def small_log(directory: Path, count: int = 20) -> tuple[SegmentedLog, list[LogBatch]]:
    batches = make_batches(random.Random(3), count, data_bytes_max=60)
    write_log(directory, batches, **OPTIONS)
    return SegmentedLog.open(directory, **OPTIONS), batches


def read_all(log: SegmentedLog) -> list[LogBatch]:
    return list(log.read_all())


def test_delete_before_drops_whole_segments_and_survives_reopen(tmp_path: Path) -> None:
    log, batches = small_log(tmp_path)
    with log:
        segments = log.segments
        assert len(segments) >= 4
        target = segments[2]
        inside = target.base_offset + 1
        assert log.delete_before(inside) == target.base_offset
        assert log.log_start_offset == target.base_offset
        kept = [b for b in batches if b.base_offset >= target.base_offset]
        assert read_all(log) == kept
        assert log.read(target.base_offset, 10**6) == kept
        assert read_log_start_offset(tmp_path) == (target.base_offset, False)
        assert log.delete_before(inside) == target.base_offset  # no-op now
        with pytest.raises(StorageInvariantError):
            log.truncate_to(target.base_offset - 1, high_watermark=0)
        with pytest.raises(StorageInvariantError):
            log.delete_before(log.log_end_offset + 1)
        end = log.log_end_offset
        log.append([LogBatch(end, batches[-1].epoch, 2, b"more")])
        log.flush()
    assert not (tmp_path / segment_file_name(0)).exists()
    with SegmentedLog.open(tmp_path, **OPTIONS) as reopened:
        assert reopened.log_start_offset == target.base_offset
        assert read_all(reopened) == [*kept, LogBatch(end, batches[-1].epoch, 2, b"more")]


def test_delete_before_the_log_end_leaves_an_empty_log_there(tmp_path: Path) -> None:
    log, _ = small_log(tmp_path)
    with log:
        end = log.log_end_offset
        assert log.delete_before(end) == end
        assert (log.log_start_offset, log.log_end_offset, log.durable_end_offset) == (end, end, end)
        assert read_all(log) == []
        assert [s.base_offset for s in log.segments] == [end]
        assert log.delete_before(end) == end
        log.append([LogBatch(end, 9, 1, b"x")])
        log.flush()
    with SegmentedLog.open(tmp_path, **OPTIONS) as reopened:
        assert (reopened.log_start_offset, reopened.log_end_offset) == (end, end + 1)
        assert reopened.last_epoch == 9


def test_delete_before_trims_the_epoch_cache(tmp_path: Path) -> None:
    batches = [LogBatch(i * 2, 1 + i // 5, 2, bytes(40)) for i in range(20)]  # epochs 1..4
    write_log(tmp_path, batches, **OPTIONS)
    with SegmentedLog.open(tmp_path, **OPTIONS) as log:
        start = log.delete_before(22)
        assert 0 < start <= 22
        first_epoch = next(b.epoch for b in batches if b.base_offset == start)
        assert log.end_offset_for_epoch(first_epoch) == (
            first_epoch,
            next(b.base_offset for b in batches if b.epoch > first_epoch),
        )
        assert log.end_offset_for_epoch(first_epoch - 1) == (first_epoch - 1, start)
        assert log.end_offset_for_epoch(99) == (4, 40)
        answers = {epoch: log.end_offset_for_epoch(epoch) for epoch in range(6)}
    with SegmentedLog.open(tmp_path, **OPTIONS) as reopened:
        assert {epoch: reopened.end_offset_for_epoch(epoch) for epoch in range(6)} == answers


@pytest.mark.parametrize("offset", [5, 40, 1000])
def test_truncate_fully_and_start_at(tmp_path: Path, offset: int) -> None:
    log, _ = small_log(tmp_path)
    with log:
        log.truncate_fully_and_start_at(offset)
        assert (log.log_start_offset, log.log_end_offset, log.durable_end_offset) == (offset,) * 3
        assert read_all(log) == []
        assert log.last_epoch == 0
        with pytest.raises(StorageInvariantError):
            log.append([LogBatch(0, 1, 1, b"")])
        log.append([LogBatch(offset, 7, 3, b"abc")])
        log.flush()
    assert read_log_start_offset(tmp_path) == (offset, False)
    with SegmentedLog.open(tmp_path, **OPTIONS) as reopened:
        assert reopened.log_start_offset == offset
        assert read_all(reopened) == [LogBatch(offset, 7, 3, b"abc")]


# ----- recovery of interrupted cleaning ---------------------------------------------------


def write_log_start(directory: Path, offset: int, *, truncating_fully: bool) -> None:
    flag = "true" if truncating_fully else "false"
    text = f"version: 0\nlog_start_offset: {offset}\ntruncating_fully: {flag}\n"
    (directory / LOG_START_OFFSET_FILE).write_text(text)


def test_recovery_finishes_an_interrupted_delete_before(tmp_path: Path) -> None:
    log, batches = small_log(tmp_path)
    with log:
        third = log.segments[2].base_offset
    # The crash came after the log-start-offset file and before the deletions.
    write_log_start(tmp_path, third, truncating_fully=False)
    (tmp_path / (LOG_START_OFFSET_FILE + ".tmp")).write_text("junk")
    with SegmentedLog.open(tmp_path, **OPTIONS) as reopened:
        assert reopened.log_start_offset == third
        assert read_all(reopened) == [b for b in batches if b.base_offset >= third]
    assert not (tmp_path / segment_file_name(0)).exists()
    assert not (tmp_path / (LOG_START_OFFSET_FILE + ".tmp")).exists()


def test_recovery_finishes_an_interrupted_truncate_fully(tmp_path: Path) -> None:
    small_log(tmp_path)[0].close()
    write_log_start(tmp_path, 1234, truncating_fully=True)
    with SegmentedLog.open(tmp_path, **OPTIONS) as reopened:
        assert (reopened.log_start_offset, reopened.log_end_offset) == (1234, 1234)
        assert [s.base_offset for s in reopened.segments] == [1234]
    assert read_log_start_offset(tmp_path) == (1234, False)


def test_a_lost_first_segment_is_corruption_once_the_log_start_is_recorded(tmp_path: Path) -> None:
    log, _ = small_log(tmp_path)
    with log:
        start = log.delete_before(log.segments[1].end_offset)
    (tmp_path / segment_file_name(start)).unlink()
    with pytest.raises(CorruptLogError, match="a missing first segment"):
        SegmentedLog.open(tmp_path, **OPTIONS)
    for path in tmp_path.glob("*.log"):
        path.unlink()
    with pytest.raises(CorruptLogError, match="no segment is left"):
        SegmentedLog.open(tmp_path, **OPTIONS)


@pytest.mark.parametrize(
    "text",
    [
        "version: 1\nlog_start_offset: 5\ntruncating_fully: false\n",
        "version: 0\nlog_start_offset: -5\ntruncating_fully: false\n",
        "version: 0\nlog_start_offset: 5\n",
        "version: 0\nlog_start_offset: 5\ntruncating_fully: maybe\n",
        "garbage",
        "\xff",
    ],
)
def test_a_damaged_log_start_file_is_corruption(tmp_path: Path, text: str) -> None:
    write_log(tmp_path, fixed_batches(3))
    (tmp_path / LOG_START_OFFSET_FILE).write_bytes(text.encode("latin-1"))
    with pytest.raises(CorruptLogError) as caught:
        SegmentedLog.open(tmp_path)
    assert caught.value.path == tmp_path / LOG_START_OFFSET_FILE


def test_cleaning_is_durable_across_a_power_loss(tmp_path: Path) -> None:
    log, batches = small_log(tmp_path)
    end = log.log_end_offset
    start = log.delete_before(log.segments[3].base_offset)
    log.append([LogBatch(end, 50, 1, b"unflushed")])
    log.simulate_crash()
    with SegmentedLog.open(tmp_path, **OPTIONS) as reopened:
        assert reopened.log_start_offset == start
        assert read_all(reopened) == [b for b in batches if b.base_offset >= start]
        reopened.truncate_fully_and_start_at(end + 10)
        reopened.simulate_crash()
    with SegmentedLog.open(tmp_path, **OPTIONS) as reopened:
        assert (reopened.log_start_offset, reopened.log_end_offset) == (end + 10, end + 10)


def test_delete_before_with_fsync_skipped_is_still_consistent_on_reopen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The negative control switch must not make cleaning itself inconsistent."""
    monkeypatch.setattr(fsutil, "UNSAFE_SKIP_FSYNC", True)
    log, batches = small_log(tmp_path)
    with log:
        start = log.delete_before(log.segments[2].base_offset)
    with SegmentedLog.open(tmp_path, **OPTIONS) as reopened:
        assert read_all(reopened) == [b for b in batches if b.base_offset >= start]


# ----- log dump of checkpoints ------------------------------------------------------------


def test_log_dump_reads_checkpoint_files(tmp_path: Path) -> None:
    image = rich_image()
    snapshot_id = write_image(tmp_path, image)
    path = snapshot_path(tmp_path, snapshot_id)
    out, err = io.StringIO(), io.StringIO()
    assert dump_log([path], out, err) == 0, err.getvalue()
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert {line["snapshot"] for line in lines} == {path.name}
    assert [line["offset"] for line in lines] == list(range(len(lines)))
    assert {line["epoch"] for line in lines} == {3}
    assert lines[0]["type"] == "SNAPSHOT_HEADER"
    assert lines[0]["control"] is True
    assert set(lines[0]["data"]) == {"version", "lastContainedLogTimestamp"}
    assert lines[-1]["type"] == "SNAPSHOT_FOOTER"
    assert [line["type"] for line in lines[1:-1]] == [
        record_kafka_type(r) for r in image_to_records(image)
    ]
    identity = next(line for line in lines if line["type"] == "TOPIC_IDENTITY_RECORD")
    assert set(identity["data"]) == {"topicId", "creationOffset"}
    # A damaged checkpoint: the records before the damage, then an error and exit 1.
    content = bytearray(path.read_bytes())
    content[-5] ^= 0xFF
    path.write_bytes(bytes(content))
    out, err = io.StringIO(), io.StringIO()
    assert dump_log([path], out, err) == 1
    assert "Error:" in err.getvalue()
    assert path.name in err.getvalue()
    assert 0 < len(out.getvalue().splitlines()) < len(lines)


def test_log_dump_of_a_segment_is_unchanged_by_snapshots_beside_it(tmp_path: Path) -> None:
    write_log(
        tmp_path, [encode_batch(base_offset=0, epoch=1, timestamp_ms=0, records=[NoOpRecord()])]
    )
    write_snapshot(tmp_path, 1, 1, [], 0)
    out, err = io.StringIO(), io.StringIO()
    assert dump_log([tmp_path], out, err) == 0
    (line,) = [json.loads(text) for text in out.getvalue().splitlines()]
    assert "snapshot" not in line
    assert line["type"] == "NO_OP_RECORD"


def test_decoded_snapshot_batches_carry_the_snapshot_epoch(tmp_path: Path) -> None:
    snapshot_id = write_snapshot(tmp_path, 3, 9, [BROKER_CONFIG], 42)
    raw = [
        batch
        for _, batch, _ in iter_snapshot_file(snapshot_path(tmp_path, snapshot_id), snapshot_id)
    ]
    assert [decode_log_batch(b).epoch for b in raw] == [9, 9, 9]
    assert os.path.getsize(snapshot_path(tmp_path, snapshot_id)) == sum(
        25 + len(b.data) for b in raw
    )
