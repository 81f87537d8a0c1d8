"""The streaming source's driver side and its reads, without a Spark session: ``LogTail``
following a log that a real ``SegmentedLog`` appends to (rolls, torn tails, truncation,
retention), and ``MetaquorumStreamReader`` planning micro-batches whose rows (read with the
executors' ``read``) must cover every offset exactly once."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from quorum.analytics.log_files import LogReadError
from quorum.analytics.log_tail import LogTail
from quorum.analytics.stream import (
    MetaquorumStreamReader,
    StreamOffsetError,
    StreamOptions,
    checkpointed_offset,
)
from quorum.metadata.batch import encode_batch
from quorum.metadata.records import NoOpRecord
from quorum.storage import SegmentedLog
from quorum.storage.frames import encode_frame

DIR = "__cluster_metadata-0"


class Writer:
    def __init__(self, root: Path, segment_bytes: int = 4096) -> None:
        self.log = SegmentedLog.open(root / DIR, segment_bytes_max=segment_bytes)
        self.epoch = 1
        self.last_written_epoch = -1  # of the last batch written (-1: none yet)

    def write(self, records: int) -> None:
        offset = self.log.log_end_offset
        batch = encode_batch(
            base_offset=offset,
            epoch=self.epoch,
            timestamp_ms=1_700_000_000_000 + offset,
            records=[NoOpRecord()] * records,
            control=False,
        )
        self.log.append([batch])
        self.log.flush()
        self.last_written_epoch = self.epoch

    @property
    def end(self) -> int:
        return self.log.log_end_offset


def offsets_read(reader: MetaquorumStreamReader, start: dict, end: dict) -> list[int]:
    read: list[int] = []
    for partition in reader.partitions(start, end):
        for batch in reader.read(partition):
            read += batch.column("offset").to_pylist()
    return read


def test_tail_follows_appends_and_rolls(tmp_path: Path) -> None:
    writer = Writer(tmp_path)
    tail = LogTail(tmp_path)
    tail.advance(0)
    assert tail.end_offset == 0
    for round_ in range(5):
        for _ in range(30):
            writer.write(3)
        tail.advance(0)
        assert tail.end_offset == writer.end, round_
    assert len(writer.log.segments) > 3, "the test rolled no segment"
    assert tail.epoch_of(0) == 1 and tail.epoch_of(writer.end - 1) == 1
    assert tail.epoch_of(writer.end) is None
    at = tail.position_of(writer.end - 1)
    assert (
        at is not None and Path(at.path).name == f"{writer.log.segments[-1].base_offset:020d}.log"
    )


def test_tail_stops_at_a_frame_being_written(tmp_path: Path) -> None:
    writer = Writer(tmp_path)
    for _ in range(4):
        writer.write(2)
    writer.log.close()
    segment = tmp_path / DIR / f"{0:020d}.log"
    frame = encode_frame(
        encode_batch(
            base_offset=8, epoch=1, timestamp_ms=1, records=[NoOpRecord()] * 5, control=False
        )
    )
    tail = LogTail(tmp_path)
    size = os.path.getsize(segment)
    for cut in range(1, len(frame)):
        os.truncate(segment, size)
        with open(segment, "ab") as f:
            f.write(frame[:cut])
        tail.advance(0)
        assert tail.end_offset == 8, f"a frame cut at {cut} of {len(frame)} bytes was counted"
    os.truncate(segment, size)
    with open(segment, "ab") as f:
        f.write(frame)
    tail.advance(0)
    assert tail.end_offset == 13


def test_tail_sees_a_truncated_and_rewritten_tail(tmp_path: Path) -> None:
    writer = Writer(tmp_path)
    for _ in range(10):
        writer.write(4)
    tail = LogTail(tmp_path)
    tail.advance(0)
    assert tail.end_offset == 40 and tail.epoch_of(39) == 1
    # A new leader's epoch: the uncommitted tail from offset 32 goes, other batches come.
    writer.log.truncate_to(32, high_watermark=0)
    writer.epoch = 2
    for _ in range(3):
        writer.write(4)
    tail.advance(0)
    assert tail.end_offset == 44
    assert tail.epoch_of(31) == 1 and tail.epoch_of(32) == 2 and tail.epoch_of(39) == 2


def test_tail_refuses_offsets_out_of_sequence(tmp_path: Path) -> None:
    writer = Writer(tmp_path)
    writer.write(3)
    writer.log.close()
    frame = encode_frame(
        encode_batch(base_offset=7, epoch=1, timestamp_ms=1, records=[NoOpRecord()], control=False)
    )
    with open(tmp_path / DIR / f"{0:020d}.log", "ab") as f:
        f.write(frame)
    with pytest.raises(LogReadError, match="base offset 7 where offset 3 was expected"):
        LogTail(tmp_path).advance(0)


def test_micro_batches_read_every_offset_once(tmp_path: Path) -> None:
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    writer = Writer(tmp_path, segment_bytes=rng.choice((1024, 4096, 65536)))
    options = StreamOptions(str(tmp_path), split_bytes=rng.choice((0, 512, 1 << 20)))
    reader = MetaquorumStreamReader(options)
    start = reader.initialOffset()
    assert start == {"offset": 0, "epoch": -1}
    read: list[int] = []
    for step in range(40):
        for _ in range(rng.randrange(0, 6)):
            writer.write(rng.randrange(1, 20))
        if rng.random() < 0.1:
            writer.epoch += 1
        if rng.random() < 0.2:  # a restarted query: a new reader resumes at the offset
            reader = MetaquorumStreamReader(options)
        end = reader.latestOffset(start, ReadAllAvailable())
        assert end["offset"] == writer.end, f"seed {seed} step {step}"
        read += offsets_read(reader, start, end)
        start = end
    assert read == list(range(writer.end)), f"seed {seed}: offsets not dense, or read twice"
    # The offset's epoch is the last batch's: an epoch bumped after the last write (10 % of
    # the last steps) has no batch yet, and the stream cannot know of it.
    assert start["epoch"] == writer.last_written_epoch, f"seed {seed}"


def test_ending_offsets_and_latest(tmp_path: Path) -> None:
    writer = Writer(tmp_path)
    for _ in range(5):
        writer.write(4)
    latest = MetaquorumStreamReader(StreamOptions(str(tmp_path), starting="latest"))
    assert latest.initialOffset() == {"offset": 20, "epoch": 1}
    capped = MetaquorumStreamReader(StreamOptions(str(tmp_path), ending=13))
    start = capped.initialOffset()
    end = capped.latestOffset(start, ReadAllAvailable())
    assert end["offset"] == 13
    assert offsets_read(capped, start, end) == list(range(13))  # cut inside a batch
    writer.write(4)
    assert capped.latestOffset(end, ReadAllAvailable()) == end  # nothing past 13
    middle = MetaquorumStreamReader(StreamOptions(str(tmp_path), starting=6))
    start = middle.initialOffset()
    end = middle.latestOffset(start, ReadAllAvailable())
    assert offsets_read(middle, start, end) == list(range(6, 24))


def test_a_truncation_below_the_stream_is_an_error_naming_the_offsets(tmp_path: Path) -> None:
    writer = Writer(tmp_path)
    for _ in range(10):
        writer.write(4)
    reader = MetaquorumStreamReader(StreamOptions(str(tmp_path)))
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {"offset": 40, "epoch": 1}
    writer.log.truncate_to(32, high_watermark=0)
    writer.epoch = 2
    for _ in range(5):
        writer.write(4)
    for fresh in (False, True):  # the running query, and one restarted from its checkpoint
        if fresh:
            reader = MetaquorumStreamReader(StreamOptions(str(tmp_path)))
        with pytest.raises(StreamOffsetError, match="up to offset 39 in a batch of epoch 1"):
            reader.latestOffset(end, ReadAllAvailable())


def test_segments_deleted_before_the_stream_read_them(tmp_path: Path) -> None:
    writer = Writer(tmp_path, segment_bytes=1024)
    for _ in range(60):
        writer.write(3)
    reader = MetaquorumStreamReader(StreamOptions(str(tmp_path)))
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    behind = {"offset": 30, "epoch": 1}
    new_start = writer.log.delete_before(120)
    assert new_start > 30
    (tmp_path / DIR / f"{120:020d}-{1:010d}.checkpoint").write_bytes(b"")
    with pytest.raises(StreamOffsetError) as caught:
        reader.latestOffset(behind, ReadAllAvailable())
    message = str(caught.value)
    assert f"next offset is 30, but the log now starts at offset {new_start}" in message
    assert "snapshots ending at: 120" in message
    with pytest.raises(StreamOffsetError, match="next offset is 30"):
        reader.partitions(behind, end)
    # A stream ahead of the deletion goes on.
    assert reader.latestOffset(end, ReadAllAvailable()) == end


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="unknown option"):
        StreamOptions.parse({"path": "x", "startOffset": "3"})
    with pytest.raises(ValueError, match="startingOffsets must be earliest, latest or an offset"):
        StreamOptions.parse({"path": "x", "startingOffsets": "first"})
    with pytest.raises(ValueError, match="needs a path"):
        StreamOptions.parse({})
    assert StreamOptions.parse({"PATH": "x", "startingoffsets": "12"}).starting == 12


def test_checkpointed_offset(tmp_path: Path) -> None:
    assert checkpointed_offset(tmp_path) is None
    (tmp_path / "offsets").mkdir()
    (tmp_path / "commits").mkdir()
    (tmp_path / "offsets" / "0").write_text('v1\n{"batchWatermarkMs":0}\n{"offset":7,"epoch":1}\n')
    (tmp_path / "offsets" / "1").write_text('v1\n{"batchWatermarkMs":0}\n{"offset":9,"epoch":1}\n')
    assert checkpointed_offset(tmp_path) is None  # offsets planned, none committed
    (tmp_path / "commits" / "0").write_text("v1\n{}\n")
    assert checkpointed_offset(tmp_path) == 7
