"""SegmentedLog: round trips, index, truncation, recovery from torn tails and corruption, crashes.

Every on-disk test works on real files in ``tmp_path``. Randomised tests use a fixed seed that
appears in the assertion message, so a failure can be replayed.
"""

from __future__ import annotations

import errno
import itertools
import os
import random
import shutil
import struct
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import crc32c
import pytest
from structlog.testing import capture_logs

from quorum import limits
from quorum.metadata.batch import LogBatch
from quorum.storage import fsutil
from quorum.storage.errors import (
    CorruptLogError,
    LogFailedError,
    StorageError,
    StorageInvariantError,
)
from quorum.storage.frames import FRAME_HEADER_BYTES, FRAME_LENGTH_MAX, encode_frame
from quorum.storage.log import SegmentedLog, index_file_name, segment_file_name

# ------------------------------------------------------------------------------------ helpers


def make_batches(
    rng: random.Random,
    count: int,
    *,
    start_offset: int = 0,
    first_epoch: int = 1,
    data_bytes_max: int = 120,
) -> list[LogBatch]:
    """``count`` contiguous batches with random sizes; the epoch sometimes jumps."""
    batches: list[LogBatch] = []
    offset = start_offset
    epoch = first_epoch
    for _ in range(count):
        if rng.random() < 0.15:
            epoch += rng.randint(1, 3)
        data = rng.randbytes(rng.randint(0, data_bytes_max))
        batch = LogBatch(offset, epoch, rng.randint(1, 5), data)
        batches.append(batch)
        offset = batch.end_offset
    return batches


def fixed_batches(count: int, *, data_bytes: int = 40, start_offset: int = 0) -> list[LogBatch]:
    """Batches of two records each, epoch 1, with recognisable data."""
    return [
        LogBatch(start_offset + 2 * i, 1, 2, bytes([i % 251 + 1]) * data_bytes)
        for i in range(count)
    ]


def write_log(directory: Path, batches: list[LogBatch], **options: int) -> Path:
    with SegmentedLog.open(directory, **options) as log:
        log.append(batches)
        log.flush()
    return directory


def frame_starts(batches: list[LogBatch]) -> list[int]:
    """Byte position of each batch's frame when all are in one segment."""
    starts = []
    position = 0
    for batch in batches:
        starts.append(position)
        position += len(encode_frame(batch))
    return starts


def reopen(directory: Path, **options: int) -> SegmentedLog:
    return SegmentedLog.open(directory, **options)


def read_everything(log: SegmentedLog) -> list[LogBatch]:
    return list(log.read_all())


def events(logs: list[MutableMapping[str, Any]], name: str) -> list[MutableMapping[str, Any]]:
    return [entry for entry in logs if entry["event"] == name]


@pytest.fixture
def rng() -> Iterator[random.Random]:
    seed = 20240611
    yield random.Random(seed)


# ------------------------------------------------------------------------------ frame format


def test_frame_format_is_pinned() -> None:
    """Spark and any other reader depend on these exact bytes."""
    frame = encode_frame(LogBatch(base_offset=5, epoch=3, record_count=2, data=b"ab"))
    covered = struct.pack(">qii", 5, 3, 2) + b"ab"
    expected = bytes([0x4D]) + struct.pack(">I", 4 + len(covered))
    expected += struct.pack(">I", crc32c.crc32c(covered)) + covered
    assert frame == expected
    assert len(frame) == FRAME_HEADER_BYTES + 2


# ------------------------------------------------------------------------- append/read/roll


def test_new_log_is_empty(tmp_path: Path) -> None:
    with reopen(tmp_path / "log") as log:
        assert (log.log_start_offset, log.log_end_offset, log.durable_end_offset) == (0, 0, 0)
        assert log.last_epoch == 0
        assert log.read(0, 1000) == []
        assert read_everything(log) == []
        assert log.segments == ()
        assert log.end_offset_for_epoch(3) == (3, 0)


@pytest.mark.parametrize(
    ("segment_bytes_max", "index_interval_bytes"),
    [(1, 1), (300, 64), (4096, 1000), (64 * 1024 * 1024, 4096)],
)
def test_append_read_reopen_round_trip(
    tmp_path: Path, rng: random.Random, segment_bytes_max: int, index_interval_bytes: int
) -> None:
    options = {"segment_bytes_max": segment_bytes_max, "index_interval_bytes": index_interval_bytes}
    batches = make_batches(rng, 150)
    with reopen(tmp_path, **options) as log:
        # Several appends of different sizes, flushed once (group commit).
        cursor = 0
        while cursor < len(batches):
            step = rng.randint(1, 12)
            log.append(batches[cursor : cursor + step])
            cursor += step
        assert log.log_end_offset == batches[-1].end_offset
        assert log.durable_end_offset == 0
        assert read_everything(log) == batches  # readable before the flush
        log.flush()
        assert log.durable_end_offset == batches[-1].end_offset
        assert log.last_epoch == batches[-1].epoch
        segments = log.segments
    # Segment files: named by their first batch, within the size limit unless a lone batch.
    by_offset = {batch.base_offset: batch for batch in batches}
    for segment in segments:
        assert segment.path.name == segment_file_name(segment.base_offset)
        assert segment.base_offset in by_offset
        if segment.size_bytes > segment_bytes_max:
            assert segment.size_bytes == len(encode_frame(by_offset[segment.base_offset]))
    for previous, following in itertools.pairwise(segments):
        assert previous.end_offset == following.base_offset
    if segment_bytes_max == 1:
        assert len(segments) == len(batches)
    if segment_bytes_max == 64 * 1024 * 1024:
        assert len(segments) == 1

    with reopen(tmp_path, **options) as log:
        assert read_everything(log) == batches
        assert log.segments == segments
        assert log.log_end_offset == log.durable_end_offset == batches[-1].end_offset
        # Every batch boundary, and offsets inside batches, read back from the right batch.
        for index, batch in enumerate(batches):
            assert log.read(batch.base_offset, 0) == [batch]
            assert log.read(batch.last_offset, 1) == [batch]
            assert log.read(batch.base_offset, 10**9) == batches[index:]


def test_read_stops_at_max_bytes_but_returns_at_least_one_batch(tmp_path: Path) -> None:
    batches = fixed_batches(10, data_bytes=75)  # each frame is exactly 100 bytes
    assert {len(encode_frame(batch)) for batch in batches} == {100}
    with reopen(tmp_path, segment_bytes_max=450) as log:
        log.append(batches)
        assert log.read(0, 0) == batches[:1]
        assert log.read(0, 99) == batches[:1]
        assert log.read(0, 100) == batches[:1]
        assert log.read(0, 299) == batches[:2]
        # Crosses from the first segment (4 frames) into the second.
        assert log.read(2, 500) == batches[1:6]
        assert log.read(18, 10_000) == batches[9:]
        assert log.read(20, 10_000) == []


def test_reads_interleave_with_appends(tmp_path: Path, rng: random.Random) -> None:
    batches = make_batches(rng, 60)
    with reopen(tmp_path, segment_bytes_max=500, index_interval_bytes=100) as log:
        for index, batch in enumerate(batches):
            log.append([batch])
            assert log.read(batch.base_offset, 1) == [batch]
            assert (
                log.read(batches[index // 2].base_offset, 10**9) == batches[index // 2 : index + 1]
            )
            if index % 7 == 0:
                log.flush()


def test_read_outside_the_log_is_a_bug(tmp_path: Path) -> None:
    with reopen(tmp_path) as log:
        log.append(fixed_batches(3))
        with pytest.raises(StorageInvariantError):
            log.read(7, 100)
        with pytest.raises(StorageInvariantError):
            log.read(-1, 100)


def test_append_checks_offsets_epochs_and_size_before_writing(tmp_path: Path) -> None:
    with reopen(tmp_path) as log:
        log.append([LogBatch(0, 2, 3, b"a")])
        bad_appends = [
            [LogBatch(4, 2, 1, b"gap")],
            [LogBatch(2, 2, 1, b"overlap")],
            [LogBatch(3, 1, 1, b"epoch goes back")],
            [LogBatch(3, 2, 1, b"ok"), LogBatch(5, 2, 1, b"gap inside the append")],
            [LogBatch(3, 2, 1, b"x" * (FRAME_LENGTH_MAX - 19))],
        ]
        for batches in bad_appends:
            with pytest.raises(StorageInvariantError):
                log.append(batches)
            assert log.log_end_offset == 3
            assert log.segments[0].size_bytes == len(encode_frame(LogBatch(0, 2, 3, b"a")))
        # Every batch RaftNode.propose may build fits (its records total <= BATCH_BYTES_MAX).
        assert limits.BATCH_BYTES_MAX + 1000 < FRAME_LENGTH_MAX - 20
        largest = LogBatch(3, 2, 1, b"x" * (FRAME_LENGTH_MAX - 20))
        log.append([largest])
        assert log.read(3, 0) == [largest]


def test_batch_larger_than_segment_gets_its_own_segment(tmp_path: Path) -> None:
    small = [LogBatch(0, 1, 1, b"s"), LogBatch(1, 1, 1, b"t")]
    large = LogBatch(2, 1, 1, b"L" * 1000)
    tail = LogBatch(3, 1, 1, b"u")
    with reopen(tmp_path, segment_bytes_max=200) as log:
        log.append([*small, large, tail])
        assert [s.base_offset for s in log.segments] == [0, 2, 3]
        assert log.segments[1].size_bytes == len(encode_frame(large))
        assert read_everything(log) == [*small, large, tail]


# ------------------------------------------------------------------------------------ index


def test_read_seeks_with_the_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    batches = fixed_batches(8000, data_bytes=100)  # ~1 MB in one segment
    bytes_read: list[int] = []
    real_pread = os.pread

    def counting_pread(fd: int, size: int, position: int) -> bytes:
        data = real_pread(fd, size, position)
        bytes_read.append(len(data))
        return data

    for interval, bound in [(256, 70_000), (2**30, 10**9)]:
        directory = tmp_path / f"interval-{interval}"
        with reopen(directory, index_interval_bytes=interval) as log:
            log.append(batches)
            bytes_read.clear()
            monkeypatch.setattr(os, "pread", counting_pread)
            assert log.read(batches[-1].base_offset, 1) == batches[-1:]
            monkeypatch.setattr(os, "pread", real_pread)
            # With an entry every 256 bytes a read near the end reads one chunk; with no
            # entries it must scan the whole segment (which shows the index is what helps).
            if interval == 256:
                assert sum(bytes_read) <= bound
            else:
                assert sum(bytes_read) >= log.segments[0].size_bytes * 9 // 10


def test_index_file_is_rebuilt_when_missing_or_inconsistent(tmp_path: Path) -> None:
    batches = fixed_batches(400, data_bytes=60)
    options = {"segment_bytes_max": 10_000, "index_interval_bytes": 500}
    write_log(tmp_path, batches, **options)
    # The index files written while appending are exactly what recovery rebuilds.
    with capture_logs() as logs, reopen(tmp_path, **options) as log:
        assert len(log.segments) >= 2
    assert events(logs, "log_index_rebuilt") == []
    index_path = tmp_path / index_file_name(0)
    original = index_path.read_bytes()
    assert len(original) % 12 == 0
    assert len(original) // 12 >= 10
    first_offset, first_position = struct.unpack_from(">qI", original, 0)
    assert (first_offset, first_position) == (0, 0)

    damages = {
        "missing": b"",
        "garbage": b"\xff" * 37,
        "wrong position": original[:12] + struct.pack(">qI", 2, 999) + original[24:],
        "stale extra entries": original + struct.pack(">qI", 10**6, 10**6),
        "truncated": original[: len(original) // 2],
    }
    for name, damaged in damages.items():
        if name == "missing":
            index_path.unlink()
        else:
            index_path.write_bytes(damaged)
        with capture_logs() as logs, reopen(tmp_path, **options) as log:
            assert read_everything(log) == batches, name
            assert log.read(batches[200].base_offset, 1) == [batches[200]], name
        rebuilt = events(logs, "log_index_rebuilt")
        assert [entry["file"] for entry in rebuilt] == [str(index_path)], name
        assert rebuilt[0]["reason"] == ("missing" if name == "missing" else "inconsistent")
        assert index_path.read_bytes() == original, name

    # An intact index is left alone.
    with capture_logs() as logs, reopen(tmp_path, **options):
        pass
    assert events(logs, "log_index_rebuilt") == []


def test_orphan_index_files_are_removed(tmp_path: Path) -> None:
    write_log(tmp_path, fixed_batches(3))
    orphan = tmp_path / index_file_name(999)
    orphan.write_bytes(b"stale")
    with reopen(tmp_path) as log:
        assert log.log_end_offset == 6
    assert not orphan.exists()


# --------------------------------------------------------------------------------- truncate


def test_truncate_to_boundary_inside_batch_and_segment_start(tmp_path: Path) -> None:
    batches = fixed_batches(20, data_bytes=75)  # 100-byte frames, offsets 0, 2, 4, ...
    options = {"segment_bytes_max": 400, "index_interval_bytes": 150}  # 4 batches per segment
    with reopen(tmp_path, **options) as log:
        log.append(batches)
        assert [s.base_offset for s in log.segments] == [0, 8, 16, 24, 32]

        log.truncate_to(40, high_watermark=0)  # at the end: nothing to do
        assert log.log_end_offset == 40

        log.truncate_to(30, high_watermark=0)  # a batch boundary inside the last segment
        assert log.log_end_offset == log.durable_end_offset == 30
        assert read_everything(log) == batches[:15]

        log.truncate_to(27, high_watermark=0)  # inside batch [26, 27]: the whole batch goes
        assert log.log_end_offset == 26
        assert read_everything(log) == batches[:13]

        log.truncate_to(16, high_watermark=0)  # a segment start: that segment is deleted
        assert [s.base_offset for s in log.segments] == [0, 8]
        assert not (tmp_path / segment_file_name(16)).exists()
        assert not (tmp_path / index_file_name(16)).exists()
        assert not (tmp_path / segment_file_name(24)).exists()
        assert log.log_end_offset == 16

        # Appending continues in the segment that became active again.
        log.append(batches[8:10])
        assert [s.base_offset for s in log.segments] == [0, 8, 16]
        assert read_everything(log) == batches[:10]
        log.flush()

    with reopen(tmp_path, **options) as log:
        assert read_everything(log) == batches[:10]


def test_truncate_everything_keeps_the_log_start(tmp_path: Path) -> None:
    batches = fixed_batches(6, start_offset=0)
    with reopen(tmp_path, segment_bytes_max=150) as log:
        log.append(batches)
        log.truncate_to(0, high_watermark=0)
        assert (log.log_start_offset, log.log_end_offset) == (0, 0)
        assert [s.size_bytes for s in log.segments] == [0]
        assert log.last_epoch == 0
        log.append(batches[:2])
    with reopen(tmp_path) as log:
        assert read_everything(log) == batches[:2]


def test_truncate_below_high_watermark_is_refused(tmp_path: Path) -> None:
    batches = fixed_batches(5)
    with reopen(tmp_path) as log:
        log.append(batches)
        log.flush()
        with pytest.raises(StorageInvariantError, match="high watermark"):
            log.truncate_to(6, high_watermark=7)
        with pytest.raises(StorageInvariantError, match="high watermark"):
            log.truncate_to(7, high_watermark=7)  # inside batch [6, 7]: would remove offset 6
        assert read_everything(log) == batches
        log.truncate_to(7, high_watermark=6)
        assert log.log_end_offset == 6
        with pytest.raises(StorageInvariantError):
            log.truncate_to(-1, high_watermark=0)


def test_truncate_unflushed_data_then_crash(tmp_path: Path) -> None:
    batches = fixed_batches(10)
    with reopen(tmp_path, segment_bytes_max=200) as log:
        log.append(batches[:4])
        log.flush()
        log.append(batches[4:])
        log.truncate_to(12, high_watermark=8)
        assert log.durable_end_offset == 12
        log.simulate_crash()
    with reopen(tmp_path) as log:
        assert read_everything(log) == batches[:6]


# --------------------------------------------------------------------------------- epochs


def reference_end_offset_for_epoch(
    batches: list[LogBatch], log_start_offset: int, log_end_offset: int, epoch: int
) -> tuple[int, int]:
    at_or_below = [batch.epoch for batch in batches if batch.epoch <= epoch]
    if not at_or_below:
        return (epoch, log_start_offset)
    found = max(at_or_below)
    later = [batch.base_offset for batch in batches if batch.epoch > found]
    return (found, min(later) if later else log_end_offset)


def test_end_offset_for_epoch_matches_brute_force(tmp_path: Path, rng: random.Random) -> None:
    batches = make_batches(rng, 120, first_epoch=2)
    epoch_max = batches[-1].epoch + 2
    log = reopen(tmp_path, segment_bytes_max=700)
    log.append(batches)
    kept = batches
    for round_number in range(6):
        end = kept[-1].end_offset if kept else 0
        for epoch in range(epoch_max + 1):
            expected = reference_end_offset_for_epoch(kept, 0, end, epoch)
            assert log.end_offset_for_epoch(epoch) == expected, (round_number, epoch)
        if round_number == 2:
            log.close()
            log = reopen(tmp_path, segment_bytes_max=700)  # the cache is rebuilt by recovery
        elif kept:
            cut = rng.randrange(len(kept))
            log.truncate_to(kept[cut].base_offset, high_watermark=0)
            kept = kept[:cut]
    log.close()


# ---------------------------------------------------------------------- torn tails (F13)


def test_cut_at_every_byte_recovers_to_last_whole_batch(tmp_path: Path) -> None:
    batches = fixed_batches(3, data_bytes=30)
    source = write_log(tmp_path / "source", batches)
    content = (source / segment_file_name(0)).read_bytes()
    starts = frame_starts(batches)
    frame_ends = [*starts[1:], len(content)]
    for cut in range(len(content)):
        directory = tmp_path / f"cut-{cut}"
        directory.mkdir()
        (directory / segment_file_name(0)).write_bytes(content[:cut])
        whole = sum(1 for end in frame_ends if end <= cut)  # batches that survive whole
        with capture_logs() as logs, reopen(directory) as log:
            assert read_everything(log) == batches[:whole], cut
            assert log.log_end_offset == (batches[whole - 1].end_offset if whole else 0), cut
        size_after = (directory / segment_file_name(0)).stat().st_size
        expected_size = starts[whole] if whole < len(batches) else len(content)
        assert size_after == expected_size, cut
        truncated = events(logs, "log_tail_truncated")
        if cut == expected_size:
            assert truncated == [], cut
        else:
            assert truncated[0]["log_level"] == "warning"
            assert truncated[0]["file"] == str(directory / segment_file_name(0))
            assert truncated[0]["byte_offset"] == expected_size
            assert truncated[0]["bytes_dropped"] == cut - expected_size
        shutil.rmtree(directory)


@pytest.mark.parametrize("zeros", [1, 24, 25, 512, 4096])
def test_trailing_zeros_are_a_torn_tail(tmp_path: Path, zeros: int) -> None:
    batches = fixed_batches(4)
    write_log(tmp_path, batches)
    path = tmp_path / segment_file_name(0)
    size = path.stat().st_size
    with path.open("ab") as file:
        file.write(bytes(zeros))
    with capture_logs() as logs, reopen(tmp_path) as log:
        assert read_everything(log) == batches
    assert path.stat().st_size == size
    assert events(logs, "log_tail_truncated")[0]["bytes_dropped"] == zeros


def test_zeroed_sector_in_last_frame_is_a_torn_tail(tmp_path: Path) -> None:
    batches = fixed_batches(3, data_bytes=1500)
    write_log(tmp_path, batches)
    path = tmp_path / segment_file_name(0)
    last_start = frame_starts(batches)[-1]
    content = bytearray(path.read_bytes())
    content[last_start + 512 : last_start + 1024] = bytes(512)
    path.write_bytes(bytes(content))
    with reopen(tmp_path) as log:
        assert read_everything(log) == batches[:2]
    assert path.stat().st_size == last_start


def flip_bit(path: Path, position: int, bit: int = 0) -> None:
    content = bytearray(path.read_bytes())
    content[position] ^= 1 << bit
    path.write_bytes(bytes(content))


def test_bit_flip_anywhere_in_last_frame_is_a_torn_tail(tmp_path: Path) -> None:
    """Nothing valid follows the last frame, so a flipped bit there is indistinguishable from a
    torn write (a partly written sector need not be zeros): recovery drops that batch only."""
    batches = fixed_batches(3, data_bytes=20)
    source = write_log(tmp_path / "source", batches)
    last_start = frame_starts(batches)[-1]
    size = (source / segment_file_name(0)).stat().st_size
    for position in range(last_start, size):
        directory = tmp_path / f"flip-{position}"
        shutil.copytree(source, directory)
        flip_bit(directory / segment_file_name(0), position, bit=position % 8)
        with reopen(directory) as log:
            assert read_everything(log) == batches[:2], position
        shutil.rmtree(directory)


def test_bit_flip_anywhere_in_middle_frame_is_corruption(tmp_path: Path) -> None:
    batches = fixed_batches(3, data_bytes=20)
    source = write_log(tmp_path / "source", batches)
    middle_start, last_start = frame_starts(batches)[1:]
    for position in range(middle_start, last_start):
        directory = tmp_path / f"flip-{position}"
        shutil.copytree(source, directory)
        path = directory / segment_file_name(0)
        flip_bit(path, position, bit=(position * 3) % 8)
        before = path.read_bytes()
        with pytest.raises(CorruptLogError) as raised:
            reopen(directory)
        assert raised.value.path == path
        assert raised.value.byte_offset == middle_start, position
        message = str(raised.value)
        assert str(path) in message
        assert f"at byte {middle_start}" in message
        assert "not a torn write" in message
        assert "metadata log directory" in message  # says what to do
        assert path.read_bytes() == before  # refusing to open changes nothing
        shutil.rmtree(directory)


def test_zeroed_sector_in_the_middle_is_corruption(tmp_path: Path) -> None:
    batches = fixed_batches(5, data_bytes=700)
    write_log(tmp_path, batches)
    path = tmp_path / segment_file_name(0)
    starts = frame_starts(batches)
    content = bytearray(path.read_bytes())
    content[starts[1] + 100 : starts[1] + 612] = bytes(512)
    path.write_bytes(bytes(content))
    with pytest.raises(CorruptLogError) as raised:
        reopen(tmp_path)
    assert raised.value.byte_offset == starts[1]


@pytest.mark.parametrize("which", ["middle", "last"])
def test_length_prefix_all_ones(tmp_path: Path, which: str) -> None:
    batches = fixed_batches(3)
    write_log(tmp_path, batches)
    path = tmp_path / segment_file_name(0)
    start = frame_starts(batches)[1 if which == "middle" else 2]
    content = bytearray(path.read_bytes())
    content[start + 1 : start + 5] = b"\xff\xff\xff\xff"
    path.write_bytes(bytes(content))
    if which == "middle":
        with pytest.raises(CorruptLogError, match="impossible frame length 4294967295"):
            reopen(tmp_path)
    else:
        with reopen(tmp_path) as log:
            assert read_everything(log) == batches[:2]


def test_damage_at_end_of_non_last_segment_is_corruption(tmp_path: Path) -> None:
    batches = fixed_batches(6, data_bytes=75)  # 100-byte frames
    write_log(tmp_path, batches, segment_bytes_max=300)
    first = tmp_path / segment_file_name(0)
    flip_bit(first, 250)  # inside the last frame of the first segment
    with pytest.raises(CorruptLogError) as raised:
        reopen(tmp_path, segment_bytes_max=300)
    assert raised.value.path == first
    assert raised.value.byte_offset == 200
    assert str(tmp_path / segment_file_name(6)) in str(raised.value)


def test_crc_valid_frame_with_wrong_offset_is_corruption_even_at_the_tail(tmp_path: Path) -> None:
    batches = fixed_batches(3)
    write_log(tmp_path, batches)
    path = tmp_path / segment_file_name(0)
    with path.open("ab") as file:
        file.write(encode_frame(LogBatch(100, 1, 1, b"from elsewhere")))
    with pytest.raises(CorruptLogError, match="offsets must be contiguous"):
        reopen(tmp_path)


def test_crc_valid_frame_with_epoch_going_back_is_corruption(tmp_path: Path) -> None:
    directory = tmp_path
    frames = encode_frame(LogBatch(0, 5, 1, b"a")) + encode_frame(LogBatch(1, 4, 1, b"b"))
    (directory / segment_file_name(0)).write_bytes(frames)
    with pytest.raises(CorruptLogError, match="epochs never go back"):
        reopen(directory)


# ------------------------------------------------------------------------- segment files


def test_missing_middle_segment_is_corruption(tmp_path: Path) -> None:
    batches = fixed_batches(9, data_bytes=75)
    write_log(tmp_path, batches, segment_bytes_max=300)
    (tmp_path / segment_file_name(6)).unlink()
    with pytest.raises(CorruptLogError) as raised:
        reopen(tmp_path)
    assert raised.value.path == tmp_path / segment_file_name(12)
    assert "previous segments end at offset 6" in str(raised.value)


def test_overlapping_segment_is_corruption(tmp_path: Path) -> None:
    batches = fixed_batches(9, data_bytes=75)
    write_log(tmp_path, batches, segment_bytes_max=300)
    # A copy of the second half of segment 0 under its own name, as a botched restore might.
    content = (tmp_path / segment_file_name(0)).read_bytes()
    (tmp_path / segment_file_name(2)).write_bytes(content[100:])
    with pytest.raises(CorruptLogError) as raised:
        reopen(tmp_path)
    assert raised.value.path == tmp_path / segment_file_name(2)
    assert "previous segments end at offset 6" in str(raised.value)


def test_segment_name_disagreeing_with_first_batch_is_corruption(tmp_path: Path) -> None:
    write_log(tmp_path, fixed_batches(3))
    (tmp_path / segment_file_name(0)).rename(tmp_path / segment_file_name(1))
    with pytest.raises(CorruptLogError, match="first batch has base offset 0"):
        reopen(tmp_path)


def test_badly_named_segment_is_refused_and_unrelated_files_ignored(tmp_path: Path) -> None:
    write_log(tmp_path, fixed_batches(3))
    (tmp_path / "quorum-state").write_text("{}")
    (tmp_path / "metaquorum.log").write_text("an application log someone put here")
    with reopen(tmp_path) as log:
        assert log.log_end_offset == 6
    (tmp_path / "6.log").write_bytes(b"")
    with pytest.raises(CorruptLogError, match="20 digits"):
        reopen(tmp_path)


@pytest.mark.parametrize("content", [b"", bytes(300)], ids=["empty", "zeros"])
def test_empty_or_zero_last_segment_is_removed(tmp_path: Path, content: bytes) -> None:
    batches = fixed_batches(4)  # 65-byte frames: 260 bytes, so the next batch rolls
    options = {"segment_bytes_max": 260}
    write_log(tmp_path, batches, **options)
    # Named where the log ends (a roll that crashed), and named past a gap (crash debris).
    for base_offset in (8, 50):
        debris = tmp_path / segment_file_name(base_offset)
        debris.write_bytes(content)
        with capture_logs() as logs, reopen(tmp_path, **options) as log:
            assert read_everything(log) == batches
            assert [s.base_offset for s in log.segments] == [0]
            log.append([LogBatch(8, 1, 1, b"next")])  # rolls: creates segment 8 afresh
            assert [s.base_offset for s in log.segments] == [0, 8]
            log.truncate_to(8, high_watermark=0)
        assert not (tmp_path / segment_file_name(50)).exists()
        assert not (tmp_path / segment_file_name(8)).exists()
        assert events(logs, "log_segment_removed")[0]["file"] == str(debris)


def test_only_segment_empty_or_zeros_keeps_its_name_as_log_start(tmp_path: Path) -> None:
    (tmp_path / segment_file_name(42)).write_bytes(bytes(100))
    with reopen(tmp_path) as log:
        assert (log.log_start_offset, log.log_end_offset) == (42, 42)
        with pytest.raises(StorageInvariantError):
            log.append([LogBatch(0, 1, 1, b"")])
        log.append([LogBatch(42, 1, 1, b"x")])
        assert log.read(42, 1) == [LogBatch(42, 1, 1, b"x")]


def test_torn_segment_after_a_gap_with_valid_data_is_corruption(tmp_path: Path) -> None:
    batches = fixed_batches(4)
    write_log(tmp_path, batches)
    (tmp_path / segment_file_name(50)).write_bytes(encode_frame(LogBatch(50, 1, 1, b"x")))
    with pytest.raises(CorruptLogError, match="a missing, extra or renamed segment"):
        reopen(tmp_path)


# --------------------------------------------------------------------- crashes (F12)


def test_crash_loses_exactly_the_unflushed_batches(tmp_path: Path) -> None:
    batches = fixed_batches(30, data_bytes=75)
    options = {"segment_bytes_max": 450}
    log = reopen(tmp_path, **options)
    log.append(batches[:10])
    log.flush()
    assert log.durable_end_offset == 20
    log.append(batches[10:])  # rolls into new segments, never flushed
    assert log.durable_end_offset == 20
    assert log.log_end_offset == 60
    log.simulate_crash()
    with reopen(tmp_path, **options) as log:
        assert read_everything(log) == batches[:10]
        assert log.log_end_offset == log.durable_end_offset == 20
        log.append(batches[10:12])  # appends continue from the durable end
        assert read_everything(log) == batches[:12]


def test_negative_control_skipping_fsync_loses_flushed_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """UNSAFE_SKIP_FSYNC must make the crash test above fail: flush claims durability, but a
    power loss takes the data away. This proves the emulation can catch a missing fsync."""
    batches = fixed_batches(10)
    monkeypatch.setattr(fsutil, "UNSAFE_SKIP_FSYNC", True)
    log = reopen(tmp_path)
    log.append(batches)
    log.flush()
    assert log.durable_end_offset == 20  # the claim
    log.simulate_crash()
    with reopen(tmp_path) as log:
        assert log.log_end_offset < 20  # the truth


def test_random_appends_flushes_truncations_and_crashes_against_a_model(tmp_path: Path) -> None:
    seed = 77
    rng = random.Random(seed)
    options = {"segment_bytes_max": 600, "index_interval_bytes": 128}
    log = reopen(tmp_path, **options)
    model: list[LogBatch] = []  # everything appended and not truncated
    durable = 0  # number of batches of ``model`` that survive a crash
    epoch = 1
    for step in range(250):
        context = f"seed={seed} step={step}"
        action = rng.random()
        if action < 0.5:
            start = model[-1].end_offset if model else 0
            new = make_batches(rng, rng.randint(1, 6), start_offset=start, first_epoch=epoch)
            epoch = new[-1].epoch
            log.append(new)
            model.extend(new)
        elif action < 0.7:
            log.flush()
            durable = len(model)
        elif action < 0.8 and model:
            cut = rng.randint(durable // 2, len(model))
            high_watermark = model[durable // 2 - 1].end_offset if durable >= 2 else 0
            target = model[cut].base_offset if cut < len(model) else log.log_end_offset
            log.truncate_to(target, high_watermark=high_watermark)
            if cut < len(model):  # a real truncation is durable on return; a no-op flushes nothing
                del model[cut:]
                durable = len(model)
        elif action < 0.9:
            log.simulate_crash()
            del model[durable:]
            log = reopen(tmp_path, **options)
        else:
            log.close()
            durable = len(model)
            log = reopen(tmp_path, **options)
        assert read_everything(log) == model, context
        assert log.log_end_offset == (model[-1].end_offset if model else 0), context
        assert log.durable_end_offset == (model[durable - 1].end_offset if durable else 0), context
        if model:
            probe = rng.choice(model)
            assert log.read(probe.base_offset, 1) == [probe], context
    log.close()


# ----------------------------------------------------------------------- I/O failures


def test_failed_fsync_fails_the_log_for_good(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = reopen(tmp_path)
    log.append(fixed_batches(2))

    def failing_fdatasync(fd: int) -> None:
        raise OSError(errno.EIO, "injected EIO")

    monkeypatch.setattr(os, "fdatasync", failing_fdatasync)
    with capture_logs() as logs, pytest.raises(OSError, match="injected EIO"):
        log.flush()
    assert events(logs, "log_failed")
    assert log.durable_end_offset == 0
    monkeypatch.undo()
    # No retry may pretend the data is durable now (fsyncgate).
    for operation in (log.flush, lambda: log.read(0, 10), lambda: log.append([])):
        with pytest.raises(LogFailedError, match="restart the node") as raised:
            operation()
        assert isinstance(raised.value, StorageError)
    log.close()  # closes the files without flushing


def test_closed_log_refuses_use(tmp_path: Path) -> None:
    log = reopen(tmp_path)
    log.close()
    log.close()  # idempotent
    with pytest.raises(StorageInvariantError, match="closed"):
        log.append(fixed_batches(1))


def test_log_tail_truncated_is_a_structlog_warning(tmp_path: Path) -> None:
    batches = fixed_batches(2)
    write_log(tmp_path, batches)
    with (tmp_path / segment_file_name(0)).open("ab") as file:
        file.write(b"\x4d\x00")
    with capture_logs() as logs, reopen(tmp_path):
        pass
    (truncated,) = events(logs, "log_tail_truncated")
    assert truncated["log_level"] == "warning"
    assert truncated["bytes_dropped"] == 2


def test_frame_that_rots_after_open_is_never_served(tmp_path: Path) -> None:
    batches = fixed_batches(3)
    with reopen(tmp_path, index_interval_bytes=1) as log:  # every batch indexed
        log.append(batches)
        log.flush()
        flip_bit(tmp_path / segment_file_name(0), frame_starts(batches)[1] + 30)
        assert log.read(4, 100) == batches[2:]
        with pytest.raises(CorruptLogError) as raised:
            log.read(2, 0)
        assert raised.value.byte_offset == frame_starts(batches)[1]
        with pytest.raises(CorruptLogError):
            read_everything(log)


def test_random_damage_only_yields_a_prefix_or_corrupt_log_error(tmp_path: Path) -> None:
    """Fuzz recovery with the damage docs/invariants.md lists for F13/F14 (bit flips at p in {1e-3,
    1e-4}, cuts, zeroed sectors, garbage tails, lost segments). Only two outcomes are documented:
    the log opens holding a contiguous run of what was written, starting at its log start offset,
    or ``CorruptLogError``. Anything else (another exception, a batch that was never written, a
    reordered log) fails. A lost *first* segment is indistinguishable from segments deleted
    behind a snapshot, so only that case may start past offset 0: the snapshot layer must check
    ``log_start_offset`` against its snapshots. Damage to the end of the last segment only
    (a cut, a garbage tail) is a torn tail and must always open."""
    seed = 5150
    rng = random.Random(seed)
    batches = make_batches(rng, 80, data_bytes_max=300)
    options = {"segment_bytes_max": 3000, "index_interval_bytes": 200}
    source = write_log(tmp_path / "source", batches, **options)
    outcomes = {"prefix": 0, "corrupt": 0}
    for trial in range(40):
        directory = tmp_path / f"trial-{trial}"
        shutil.copytree(source, directory)
        segments = sorted(directory.glob("*.log"))
        victim = rng.choice(segments)
        content = bytearray(victim.read_bytes())
        damage = rng.choice(["flip", "cut", "sector", "garbage", "unlink"])
        if damage == "flip":
            probability = rng.choice([1e-3, 1e-4])
            for position in range(len(content)):
                if rng.random() < probability * 8:
                    content[position] ^= 1 << rng.randrange(8)
        elif damage == "cut":
            del content[rng.randrange(len(content)) :]
        elif damage == "sector":
            start = rng.randrange(len(content))
            content[start : start + 512] = bytes(len(content[start : start + 512]))
        elif damage == "garbage":
            content += rng.randbytes(rng.randint(1, 600))
        victim.write_bytes(bytes(content))
        if damage == "unlink":
            victim.unlink()
        context = f"seed={seed} trial={trial} damage={damage} file={victim.name}"
        torn_tail_only = damage in ("cut", "garbage") and victim == segments[-1]
        try:
            with reopen(directory, **options) as log:
                recovered = read_everything(log)
        except CorruptLogError as error:
            assert error.path.parent == directory, context
            assert not torn_tail_only, context
            outcomes["corrupt"] += 1
        else:
            first = next(
                (i for i, batch in enumerate(batches) if batch.base_offset == log.log_start_offset),
                len(batches),
            )
            assert recovered == batches[first : first + len(recovered)], context
            if first > 0:
                assert (damage, victim) == ("unlink", segments[0]), context
            outcomes["prefix"] += 1
            if torn_tail_only and damage == "garbage":
                assert recovered == batches, context
        shutil.rmtree(directory)
    assert outcomes["prefix"] > 0
    assert outcomes["corrupt"] > 0


@pytest.mark.parametrize("segment_bytes_max", [300, 1 << 20])
def test_read_all_from_an_offset_starts_at_the_batch_containing_it(
    tmp_path: Path, rng: random.Random, segment_bytes_max: int
) -> None:
    """Start-up after a snapshot reads only the log after it (through the index)."""
    batches = make_batches(rng, 200)
    write_log(tmp_path, batches, segment_bytes_max=segment_bytes_max, index_interval_bytes=256)
    with reopen(tmp_path, segment_bytes_max=segment_bytes_max) as log:
        for batch_index in rng.sample(range(len(batches)), 25):
            batch = batches[batch_index]
            offset = rng.randrange(batch.base_offset, batch.end_offset)
            assert list(log.read_all(offset)) == batches[batch_index:], (batch_index, offset)
        assert list(log.read_all(0)) == batches
        assert list(log.read_all(batches[-1].end_offset)) == []
        assert list(log.read_all(batches[-1].end_offset + 10)) == []
