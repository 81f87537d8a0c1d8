"""The frame format and its one read-only reader (quorum/storage/frames.py).

The torn-tail rule itself is exercised through every reader in test_storage_log.py (recovery),
test_log_dump.py and test_analytics_source.py; this module pins the reader's own contract and
the bound on the scan for a later valid frame.
"""

from __future__ import annotations

import io
import pickle
import random
import struct
import time
from pathlib import Path

import crc32c
import pytest

from quorum import limits
from quorum.metadata.batch import LogBatch
from quorum.storage.errors import CorruptLogError
from quorum.storage.frames import (
    FRAME_HEADER,
    FRAME_HEADER_BYTES,
    FRAME_MAGIC,
    CorruptFrameError,
    Frame,
    FrameHeader,
    FrameScanLimitError,
    FrameView,
    Tail,
    check_frame,
    encode_frame,
    find_valid_frame,
    read_frames,
    read_segment,
    read_stream_frames,
    segment_files,
)
from quorum.storage.log import SegmentedLog, segment_file_name

HOSTILE_BYTES = 16 * 1024 * 1024
# CPU seconds (not wall time: the test machine is shared) a scan of HOSTILE_BYTES may take.
HOSTILE_CPU_SECONDS_MAX = 2.0


def frames_of(batches: list[LogBatch]) -> bytes:
    return b"".join(encode_frame(batch) for batch in batches)


def contiguous(count: int, *, data: bytes = b"records") -> list[LogBatch]:
    return [LogBatch(base_offset=i, epoch=1, record_count=1, data=data) for i in range(count)]


def raw_frame(base_offset: int, epoch: int, record_count: int, data: bytes) -> bytes:
    """A CRC-valid frame with any fields, also ones ``LogBatch`` refuses."""
    covered = struct.pack(">qii", base_offset, epoch, record_count) + data
    prefix = struct.pack(">BI", FRAME_MAGIC, 4 + len(covered))
    return prefix + crc32c.crc32c(covered).to_bytes(4, "big") + covered


def unbounded_find_valid_frame(buf: bytes, start: int) -> int | None:
    """The scan as it was before it was bounded: a CRC check at every plausible magic byte."""
    pos = buf.find(bytes((FRAME_MAGIC,)), start)
    while pos != -1:
        if len(buf) - pos >= FRAME_HEADER_BYTES:
            _, _, _, base_offset, epoch, record_count = FRAME_HEADER.unpack_from(buf, pos)
            plausible = base_offset >= 0 and epoch >= 0 and record_count >= 1
            if plausible and isinstance(check_frame(buf, pos), FrameHeader):
                return pos
        pos = buf.find(bytes((FRAME_MAGIC,)), pos + 1)
    return None


def write_segment(directory: Path, contents: bytes, base_offset: int = 0) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / segment_file_name(base_offset)
    path.write_bytes(contents)
    return path


def cpu_seconds(function: object, *args: object) -> tuple[float, object]:
    """``function(*args)``'s result (or the exception it raised) and the CPU time it took."""
    assert callable(function)
    started = time.process_time()
    try:
        result = function(*args)
    except Exception as exc:
        result = exc
    return time.process_time() - started, result


# ----- the scan for a valid frame ---------------------------------------------------------


def random_damaged_buffer(rng: random.Random) -> bytes:
    """Frames, damaged frames, magic-heavy and random bytes, CRC-valid implausible frames."""
    pieces: list[bytes] = []
    for _ in range(rng.randint(1, 6)):
        kind = rng.randrange(6)
        if kind == 0:
            batch = LogBatch(rng.randrange(1000), rng.randrange(5), rng.randint(1, 3), b"")
            pieces.append(encode_frame(batch) + rng.randbytes(rng.randrange(40)))
        elif kind == 1:
            frame = bytearray(encode_frame(LogBatch(7, 2, 1, rng.randbytes(rng.randrange(60)))))
            frame[rng.randrange(len(frame))] ^= 1 << rng.randrange(8)
            pieces.append(bytes(frame[: rng.randint(1, len(frame))]))
        elif kind == 2:
            pieces.append(bytes(rng.choice((0x4D, 0x00, 0x7F)) for _ in range(rng.randrange(80))))
        elif kind == 3:
            pieces.append(rng.randbytes(rng.randrange(120)))
        elif kind == 4:
            pieces.append(
                raw_frame(rng.choice((-1, 3)), rng.choice((-1, 0)), rng.choice((0, 1)), b"")
            )
        else:
            pieces.append(b"\x4d\x00\x00\x00" + rng.randbytes(rng.randrange(40)))
    return b"".join(pieces)


def test_bounded_scan_agrees_with_the_unbounded_scan() -> None:
    """Below its bounds the scan finds exactly the frame the old scan found."""
    rng = random.Random(20261123)
    for _ in range(3_000):
        buf = random_damaged_buffer(rng)
        start = rng.randrange(len(buf) + 1)
        assert find_valid_frame(buf, start) == unbounded_find_valid_frame(buf, start), (buf, start)


def test_a_16_mib_file_of_magic_bytes_is_a_torn_tail_found_fast(tmp_path: Path) -> None:
    """The scan that took 0.26 s for 256 KiB of magic bytes (and grew with every byte) is fast,
    with the decision it always had: nothing valid follows, so the damage is a torn tail."""
    good = frames_of(contiguous(3))
    path = write_segment(tmp_path, good + b"\x4d" * HOSTILE_BYTES)
    assert unbounded_find_valid_frame(b"\x4d" * 256 * 1024, 0) is None  # the old decision
    seconds, items = cpu_seconds(lambda: list(read_frames([path])))
    assert seconds < HOSTILE_CPU_SECONDS_MAX
    assert isinstance(items, list)
    *frames, tail = items
    assert [frame.batch.base_offset for frame in frames] == [0, 1, 2]
    problem = f"impossible frame length {0x4D4D4D4D}"
    assert tail == Tail(path, len(good), HOSTILE_BYTES, problem)


def test_a_valid_frame_after_16_mib_of_magic_bytes_is_found_fast(tmp_path: Path) -> None:
    good = frames_of(contiguous(1))
    later = encode_frame(LogBatch(9, 1, 1, b"late"))
    path = write_segment(tmp_path, good + b"\x4d" * HOSTILE_BYTES + later)
    seconds, error = cpu_seconds(lambda: list(read_frames([path])))
    assert seconds < HOSTILE_CPU_SECONDS_MAX
    assert isinstance(error, CorruptFrameError)
    assert error.byte_offset == len(good)
    assert f"yet a valid batch follows at byte {len(good) + HOSTILE_BYTES}" in error.problem


@pytest.mark.parametrize(
    ("pattern", "limit"),
    [
        # Every second byte starts a whole frame of 4.8 MiB with a plausible header: a CRC per
        # position made this scan quadratic (hours for 16 MiB).
        (b"\x4d\x00", "FRAME_SCAN_CRC_BYTES_MAX"),
        # Every fourth byte starts a plausible frame too long to be whole in 4 MiB: cheap each,
        # but a million of them.
        (b"\x4d\x00\x7f\x4d", "FRAME_SCAN_CANDIDATES_MAX"),
    ],
)
def test_hostile_bytes_reach_a_scan_bound_fast_and_are_corruption(
    tmp_path: Path, pattern: bytes, limit: str
) -> None:
    """A scan that reaches a bound has not ruled out a valid frame: the damage is corruption,
    and recovery refuses to start (naming file and byte) instead of truncating anything."""
    good = frames_of(contiguous(2))
    size = HOSTILE_BYTES if limit == "FRAME_SCAN_CRC_BYTES_MAX" else 4 * 1024 * 1024
    contents = good + pattern * (size // len(pattern))
    path = write_segment(tmp_path, contents)
    seconds, error = cpu_seconds(lambda: list(read_frames([path])))
    assert seconds < HOSTILE_CPU_SECONDS_MAX
    assert isinstance(error, CorruptFrameError)
    assert error.byte_offset == len(good)
    assert limit in error.problem
    assert "without ruling one out: taken as corruption, not a torn write" in error.problem
    seconds, error = cpu_seconds(SegmentedLog.open, tmp_path)
    assert seconds < HOSTILE_CPU_SECONDS_MAX
    assert isinstance(error, CorruptLogError)
    assert error.path == path
    assert error.byte_offset == len(good)
    assert path.read_bytes() == contents


def test_scan_bounds_are_named_in_limits() -> None:
    assert limits.FRAME_SCAN_CANDIDATES_MAX >= 1_000
    assert limits.FRAME_SCAN_CRC_BYTES_MAX >= 8 * limits.BATCH_BYTES_MAX
    with pytest.raises(FrameScanLimitError, match="FRAME_SCAN_CANDIDATES_MAX"):
        find_valid_frame(b"\x4d\x00\x7f\x4d" * (limits.FRAME_SCAN_CANDIDATES_MAX + 10), 0)


# ----- the reader ---------------------------------------------------------------------------


def test_read_frames_walks_every_segment_in_order(tmp_path: Path) -> None:
    first = write_segment(tmp_path, frames_of(contiguous(3)))
    batches = [LogBatch(3, 2, 2, b"second segment")]
    second = write_segment(tmp_path, frames_of(batches), base_offset=3)
    (tmp_path / "00000000000000000000.index").write_bytes(b"")
    (tmp_path / "quorum-state").write_text("{}")
    assert segment_files(tmp_path) == [first, second]
    items = list(read_frames(segment_files(tmp_path)))
    assert all(isinstance(item, Frame) for item in items)
    assert [(item.path, item.position) for item in items if isinstance(item, Frame)] == [
        (first, 0),
        (first, len(encode_frame(contiguous(3)[0]))),
        (first, 2 * len(encode_frame(contiguous(3)[0]))),
        (second, 0),
    ]
    assert [item.batch for item in items if isinstance(item, Frame)][-1] == batches[0]


def test_damage_followed_by_a_later_segment_is_corruption(tmp_path: Path) -> None:
    good = frames_of(contiguous(2))
    first = write_segment(tmp_path, good + b"\x4d\x00\x00")
    second = write_segment(tmp_path, frames_of([LogBatch(2, 1, 1, b"")]), base_offset=2)
    with pytest.raises(CorruptFrameError, match="yet the later segment") as raised:
        list(read_frames([first, second]))
    assert (raised.value.path, raised.value.byte_offset) == (first, len(good))
    assert "not a torn write" in str(raised.value)


def test_a_crc_valid_frame_with_impossible_fields_is_corruption_even_at_the_tail(
    tmp_path: Path,
) -> None:
    good = frames_of(contiguous(1))
    path = write_segment(tmp_path, good + raw_frame(1, 1, 0, b"zero records"))
    with pytest.raises(CorruptFrameError, match="record count 0 \\(corrupt\\)") as raised:
        list(read_frames([path]))
    assert raised.value.byte_offset == len(good)


def test_read_segment_reads_the_rest_only_when_needed_and_stops_at_stop() -> None:
    contents = frames_of(contiguous(4))
    size = len(encode_frame(contiguous(1)[0]))
    whole = list(read_segment(Path("x.log"), contents))
    asked: list[int] = []

    def rest() -> bytes:
        asked.append(1)
        return contents

    prefix = list(read_segment(Path("x.log"), contents[: size + 3], read_rest=rest))
    assert asked == [1]
    assert [tuple(v)[:5] for v in prefix] == [tuple(v)[:5] for v in whole]
    assert all(isinstance(v, FrameView) for v in whole)
    ranged = list(read_segment(Path("x.log"), contents[size:], origin=size, stop=2 * size + 1))
    assert [v.position for v in ranged if isinstance(v, FrameView)] == [size, 2 * size]


def test_a_complete_file_has_no_tail() -> None:
    contents = frames_of(contiguous(2))[:-1]
    assert isinstance(list(read_segment(Path("x.log"), contents))[-1], Tail)
    with pytest.raises(CorruptFrameError, match="a checkpoint is written whole"):
        list(read_segment(Path("s.checkpoint"), contents, complete=True))


def test_read_stream_frames_raises_for_any_damage() -> None:
    contents = frames_of(contiguous(2))
    stream = list(read_stream_frames(Path("s"), io.BytesIO(contents)))
    assert [batch for _, batch in stream] == contiguous(2)
    size = len(contents) // 2
    for cut, problem in [
        (2 * size - 1, f"incomplete frame ({size - 1} of {size} bytes present)"),
        (size + 2, "incomplete frame header (2 bytes)"),
    ]:
        with pytest.raises(CorruptFrameError) as raised:
            list(read_stream_frames(Path("s"), io.BytesIO(contents[:cut])))
        assert (raised.value.byte_offset, raised.value.problem) == (size, problem)
    with pytest.raises(CorruptFrameError, match="impossible frame length 4294967295"):
        list(read_stream_frames(Path("s"), io.BytesIO(b"\x4d\xff\xff\xff\xff" + bytes(40))))
    with pytest.raises(CorruptFrameError, match="epoch -1"):
        list(read_stream_frames(Path("s"), io.BytesIO(raw_frame(0, -1, 1, b""))))


def test_corrupt_frame_error_crosses_process_boundaries() -> None:
    error = CorruptFrameError(Path("/l/00000000000000000000.log"), 7, "bad magic byte 0x00")
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.path, copy.byte_offset, copy.problem, str(copy)) == (
        error.path,
        7,
        "bad magic byte 0x00",
        "/l/00000000000000000000.log at byte 7: bad magic byte 0x00",
    )
